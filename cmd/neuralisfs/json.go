package main

import "reflect"

// emptyLists returns a copy of v in which every nil slice and map that JSON
// would print as null is empty instead, so scripts can iterate over every
// list a --json command prints without a null check.
func emptyLists(v any) any {
	if v == nil {
		return v
	}
	c := reflect.New(reflect.TypeOf(v))
	c.Elem().Set(reflect.ValueOf(v))
	fillNil(c.Elem(), 0)
	return c.Interface()
}

func fillNil(v reflect.Value, depth int) {
	if depth > 64 {
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			fillNil(v.Elem(), depth+1)
		}
	case reflect.Interface:
		if v.IsNil() || !v.CanSet() {
			return
		}
		e := reflect.New(v.Elem().Type()).Elem()
		e.Set(v.Elem())
		fillNil(e, depth+1)
		v.Set(e)
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			if f := v.Field(i); f.CanSet() {
				fillNil(f, depth+1)
			}
		}
	case reflect.Slice:
		if v.IsNil() {
			if v.CanSet() {
				v.Set(reflect.MakeSlice(v.Type(), 0, 0))
			}
			return
		}
		for i := 0; i < v.Len(); i++ {
			fillNil(v.Index(i), depth+1)
		}
	case reflect.Array:
		for i := 0; i < v.Len(); i++ {
			fillNil(v.Index(i), depth+1)
		}
	case reflect.Map:
		if v.IsNil() {
			if v.CanSet() {
				v.Set(reflect.MakeMap(v.Type()))
			}
			return
		}
		for _, k := range v.MapKeys() {
			e := reflect.New(v.Type().Elem()).Elem()
			e.Set(v.MapIndex(k))
			fillNil(e, depth+1)
			v.SetMapIndex(k, e)
		}
	}
}

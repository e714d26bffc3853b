package policy

import (
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"
)

// cpuTime is the process's user+system CPU time. The benchmarks report it
// per op as cpu-ns/op, which stays honest on a machine shared with other
// work, where wall-clock ns/op includes time spent waiting for a CPU.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchSet builds 1,000 rules over 50 sources: per source, tree rules on
// several top folders, extension rules below some, literal files, name rules
// anywhere, a brace glob, for a mix of "*", named principals and roles.
func benchSet(tb testing.TB) (*Set, []string, []string) {
	tb.Helper()
	cfg := Config{OwnerUID: 1000}
	for i := 0; i < 8; i++ {
		cfg.Principals = append(cfg.Principals, Principal{
			Name: fmt.Sprintf("p%d", i), UIDs: []uint32{uint32(2000 + i)}, Roles: []string{fmt.Sprintf("r%d", i%3)}})
	}
	whos := [][]string{{"*"}, {"p1"}, {"role:r0"}, {"p3", "p4"}, {"role:r2"}, {"other"}}
	var slugs []string
	for s := 0; s < 50; s++ {
		slug := fmt.Sprintf("src%d", s)
		slugs = append(slugs, slug)
		cfg.Sources = append(cfg.Sources, Source{Slug: slug})
	}
	line := 0
	add := func(uri string, deny bool, caps ...Cap) {
		line++
		r := Rule{URI: uri, Who: whos[line%len(whos)], File: "bench.toml", Line: line}
		if deny {
			r.Deny = caps
		} else {
			r.Allow = caps
		}
		cfg.Rules = append(cfg.Rules, r)
	}
	dirs := []string{"src", "docs", "secrets", "build", "vendor", "tests"}
	for len(cfg.Rules) < 1000 {
		s := slugs[len(cfg.Rules)%len(slugs)]
		d := dirs[(len(cfg.Rules)/len(slugs))%len(dirs)]
		switch (len(cfg.Rules) / 7) % 6 {
		case 0:
			add(s+"://"+d+"/**", true, Read, Write)
		case 1:
			add(s+"://"+d+"/internal/*.go", false, Read)
		case 2:
			add(s+"://**/*.pem", true, Read)
		case 3:
			add(s+"://"+d+"/README.md", false, Read, Write)
		case 4:
			add(s+"://{"+d+",x}/**/gen_*", true, Write)
		case 5:
			add(s+"://"+d+"/", false, Exec)
		}
	}
	s, err := New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	var paths []string
	for _, d := range append(dirs, "other") {
		paths = append(paths, d+"/internal/a/main.go", d+"/internal/x.go", d+"/README.md", d+"/k/server.pem", d, d+"/gen_x.go")
	}
	return s, slugs, paths
}

func BenchmarkDecide(b *testing.B) {
	s, slugs, paths := benchSet(b)
	ps := s.Principals()
	r := rand.New(rand.NewPCG(1, 2))
	type q struct {
		p          *Principal
		slug, path string
		c          Cap
	}
	qs := make([]q, 4096)
	for i := range qs {
		qs[i] = q{ps[r.IntN(len(ps))], slugs[r.IntN(len(slugs))], paths[r.IntN(len(paths))], allCaps[r.IntN(3)]}
	}
	b.ReportAllocs()
	allowed := 0
	start := cpuTime()
	for i := 0; b.Loop(); i++ {
		x := &qs[i&4095]
		if s.Decide(x.p, x.slug, x.path, x.c).Allowed {
			allowed++
		}
	}
	b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(allowed)/float64(b.N), "allowed/op")
}

func BenchmarkDecideRead(b *testing.B) {
	s, slugs, paths := benchSet(b)
	p, _ := s.PrincipalByName("p1")
	b.ReportAllocs()
	start := cpuTime()
	for i := 0; b.Loop(); i++ {
		s.Decide(p, slugs[i%len(slugs)], paths[i%len(paths)], Read)
	}
	b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
}

func BenchmarkUniform(b *testing.B) {
	s, slugs, paths := benchSet(b)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		s.Uniform(slugs[i%len(slugs)], paths[i%len(paths)])
	}
}

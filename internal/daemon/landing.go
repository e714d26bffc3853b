package daemon

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"

	"github.com/neuralis/neuralisfs/mounts"
)

// landing records, in state_dir/landing.jsonl, the names a revert writes a
// file under before renaming it over its own (restore), while they exist:
// a daemon killed between the two leaves that file, which the mount shows
// to nobody (reserved.DaemonPrefix) and which would stay in the backing
// folder for good; the next start removes it (clean). (An approval of held
// changes keeps the same record in its layer: held.Layer.RecoverAside.)
type landing struct {
	mu   sync.Mutex
	path string
	busy int // names noted and not yet done: at 0 the records go
}

type landingRecord struct {
	Slug string `json:"slug"`
	Rel  string `json:"rel"`
	Done bool   `json:"done,omitempty"`
}

// note records that slug://rel is about to be made (synced, so that it
// is on disk before the file is) or, done, that it is gone.
func (l *landing) note(slug, rel string, done bool) error {
	if l == nil {
		return nil // no journal, so no revert
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	b, _ := json.Marshal(landingRecord{Slug: slug, Rel: rel, Done: done})
	_, err = f.Write(append(b, '\n'))
	if err == nil && !done {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if !done {
		l.busy++
	} else if l.busy--; l.busy <= 0 {
		l.busy = 0
		os.Remove(l.path) // nothing left in flight: the file stays small
	}
	return err
}

// clean removes the files the records say were left, through their
// sources' confined roots, then the records. A source that is not there
// now keeps its records for a later start.
func (l *landing) clean(root func(slug string) (*mounts.Root, error)) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	b, err := os.ReadFile(l.path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var order []landingRecord
	left := map[landingRecord]bool{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		var r landingRecord
		if json.Unmarshal(sc.Bytes(), &r) != nil {
			continue // a torn last line
		}
		k := landingRecord{Slug: r.Slug, Rel: r.Rel}
		if r.Done {
			delete(left, k)
			continue
		}
		if !left[k] {
			order = append(order, k)
		}
		left[k] = true
	}
	var keep bytes.Buffer
	var errs []error
	for _, k := range order {
		if !left[k] {
			continue
		}
		r, err := root(k.Slug)
		if err == nil {
			err = r.Unlink(k.Rel)
			if errors.Is(err, syscall.ENOENT) {
				err = nil
			}
			if err == nil {
				continue
			}
			errs = append(errs, fmt.Errorf("removing %s://%s, left by a revert that did not finish: %w", k.Slug, k.Rel, err))
		}
		line, _ := json.Marshal(k)
		keep.Write(append(line, '\n'))
	}
	if keep.Len() == 0 {
		err = os.Remove(l.path)
	} else {
		err = os.WriteFile(l.path, keep.Bytes(), 0o600)
	}
	return errors.Join(append(errs, err)...)
}

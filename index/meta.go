package index

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// metaEntry is what the index remembers of a file: enough to tell, at
// restart, whether it changed without reading it.
type metaEntry struct {
	size    int64
	mtime   int64 // ns
	digest  [sha256.Size]byte
	indexed bool // false: read and refused for its content (binary, not UTF-8)
	// racy: the file was read within racyWindow of its mtime, so a write
	// in the same tick of the clock could have changed it since without
	// changing its size or mtime. Reconcile reads it again rather than
	// trust them (git's "racily clean" entries).
	racy bool
}

const metaEntryLen = 8 + 8 + 1 + sha256.Size

// The flags byte of an encoded entry.
const (
	metaIndexed = 1 << iota
	metaRacy
)

// racyWindow bounds how coarse a backing file system's mtimes may be:
// Linux stamps them from a clock that moves once a tick (up to 10 ms), FAT
// once every 2 s.
const racyWindow = 2 * time.Second

// racyAt reports whether a file with this mtime (ns), stat'd at now, is racy.
func racyAt(mtime int64, now time.Time) bool {
	return now.UnixNano()-mtime < int64(racyWindow)
}

func (e metaEntry) encode() []byte {
	b := make([]byte, metaEntryLen)
	binary.LittleEndian.PutUint64(b[0:], uint64(e.size))
	binary.LittleEndian.PutUint64(b[8:], uint64(e.mtime))
	if e.indexed {
		b[16] |= metaIndexed
	}
	if e.racy {
		b[16] |= metaRacy
	}
	copy(b[17:], e.digest[:])
	return b
}

func decodeMetaEntry(b []byte) (metaEntry, bool) {
	if len(b) != metaEntryLen {
		return metaEntry{}, false
	}
	var e metaEntry
	e.size = int64(binary.LittleEndian.Uint64(b[0:]))
	e.mtime = int64(binary.LittleEndian.Uint64(b[8:]))
	e.indexed = b[16]&metaIndexed != 0
	e.racy = b[16]&metaRacy != 0
	copy(e.digest[:], b[17:])
	return e, true
}

// metaChange is one change to the side store.
type metaChange struct {
	slug, path string
	entry      metaEntry
	del        bool
}

// metaStore is the side store (bbolt) of per-file state, one bucket per
// source, keyed by path. Changes are queued by bleve's persisted callbacks
// and written by one goroutine, so the store never claims more than bleve
// has on disk.
type metaStore struct {
	db *bolt.DB

	mu      sync.Mutex
	queue   []metaChange
	stopped bool
	wake    chan struct{}
	done    chan struct{}
	err     error // first write error, reported by close
}

var (
	stateBucket = []byte("state")
	versionKey  = []byte("version")
)

func sourceBucket(slug string) []byte { return []byte("src/" + slug) }

// openMeta opens or creates the store. fresh reports that it holds nothing
// (new, unreadable and recreated, or of another version and reset).
func openMeta(file, version string) (m *metaStore, fresh bool, err error) {
	db, err := bolt.Open(file, 0o600, &bolt.Options{Timeout: time.Second})
	if errors.Is(err, berrors.ErrTimeout) {
		return nil, false, fmt.Errorf("%s is in use by another process (only one daemon may open an index)", file)
	}
	if err != nil {
		// A damaged side store only costs a full re-read: start over.
		if rmErr := os.Remove(file); rmErr != nil && !errors.Is(rmErr, os.ErrNotExist) {
			return nil, false, err
		}
		if db, err = bolt.Open(file, 0o600, &bolt.Options{Timeout: time.Second}); err != nil {
			return nil, false, err
		}
		fresh = true
	}
	m = &metaStore{db: db, wake: make(chan struct{}, 1), done: make(chan struct{})}
	var have string
	_ = db.View(func(tx *bolt.Tx) error {
		if b := tx.Bucket(stateBucket); b != nil {
			have = string(b.Get(versionKey))
		}
		return nil
	})
	if have != version {
		if err := m.reset(version); err != nil {
			db.Close()
			return nil, false, err
		}
		fresh = true
	}
	go m.writer()
	return m, fresh, nil
}

// reset empties the store and records version.
func (m *metaStore) reset(version string) error {
	return m.db.Update(func(tx *bolt.Tx) error {
		var names [][]byte
		if err := tx.ForEach(func(name []byte, _ *bolt.Bucket) error {
			names = append(names, append([]byte(nil), name...))
			return nil
		}); err != nil {
			return err
		}
		for _, n := range names {
			if err := tx.DeleteBucket(n); err != nil {
				return err
			}
		}
		b, err := tx.CreateBucket(stateBucket)
		if err != nil {
			return err
		}
		return b.Put(versionKey, []byte(version))
	})
}

// load returns every entry of slug.
func (m *metaStore) load(slug string) (map[string]metaEntry, error) {
	var files map[string]metaEntry
	err := m.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(sourceBucket(slug))
		if b == nil {
			return nil
		}
		// Sized once: growing a map of 50,000 paths costs more than
		// counting its keys.
		n := 0
		c := b.Cursor()
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			n++
		}
		files = make(map[string]metaEntry, n)
		return b.ForEach(func(k, v []byte) error {
			if e, ok := decodeMetaEntry(v); ok {
				files[string(k)] = e
			}
			return nil
		})
	})
	if files == nil {
		files = make(map[string]metaEntry)
	}
	return files, err
}

// slugs lists the sources the store holds state for.
func (m *metaStore) slugs() []string {
	var out []string
	_ = m.db.View(func(tx *bolt.Tx) error {
		return tx.ForEach(func(name []byte, _ *bolt.Bucket) error {
			if s, ok := strings.CutPrefix(string(name), "src/"); ok {
				out = append(out, s)
			}
			return nil
		})
	})
	return out
}

// enqueue queues changes for the writer.
func (m *metaStore) enqueue(changes []metaChange) {
	if len(changes) == 0 {
		return
	}
	m.mu.Lock()
	if !m.stopped {
		m.queue = append(m.queue, changes...)
	}
	m.mu.Unlock()
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

func (m *metaStore) writer() {
	defer close(m.done)
	for {
		<-m.wake
		m.mu.Lock()
		q, stopped := m.queue, m.stopped
		m.queue = nil
		m.mu.Unlock()
		if len(q) > 0 {
			if err := m.write(q); err != nil {
				m.mu.Lock()
				if m.err == nil {
					m.err = err
				}
				m.mu.Unlock()
			}
		}
		if stopped {
			return
		}
	}
}

func (m *metaStore) write(q []metaChange) error {
	return m.db.Update(func(tx *bolt.Tx) error {
		for _, c := range q {
			b, err := tx.CreateBucketIfNotExists(sourceBucket(c.slug))
			if err != nil {
				return err
			}
			if c.del {
				err = b.Delete([]byte(c.path))
			} else {
				err = b.Put([]byte(c.path), c.entry.encode())
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
}

// close writes what is queued and closes the store.
func (m *metaStore) close() error {
	m.mu.Lock()
	m.stopped = true
	m.mu.Unlock()
	select {
	case m.wake <- struct{}{}:
	default:
	}
	<-m.done
	err := m.db.Close()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err != nil {
		return fmt.Errorf("index side store: %w", m.err)
	}
	return err
}

// Package secretkey keeps a random key in a file of the daemon's state:
// made at the first Load (random bytes, mode 0600, written beside its
// name, synced and renamed over it, then the folder synced) and read
// back at every later one. The journal enciphers its record ids with
// one, and held changes key their ids with one, so that what a caller
// is shown says nothing a guess could be tested against.
package secretkey

import (
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// TempPrefix starts the name the key is written under before it is
// renamed over its own.
const TempPrefix = "tmp-"

// Load returns the n-byte key in path, making it when there is none. A
// file of another length is an error that names it.
func Load(path string, n int) ([]byte, error) {
	key, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		key = make([]byte, n)
		rand.Read(key)
		if err := write(path, key); err != nil {
			return nil, err
		}
		return key, nil
	}
	if err != nil {
		return nil, err
	}
	if len(key) != n {
		return nil, fmt.Errorf("%s holds %d bytes, not a key of %d", path, len(key), n)
	}
	return key, nil
}

func write(path string, b []byte) error {
	dir := filepath.Dir(path)
	tmp := filepath.Join(dir, TempPrefix+filepath.Base(path))
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

package journal

import (
	"crypto/cipher"
	"crypto/des"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Record ids are shown enciphered. A stored id starts with the record's
// sequence number ("N-hhhh"), which orders the records and finds one by a
// binary search; shown as it is, the gaps between the ids a caller sees
// would count the changes of files hidden from it. History, Plan and the
// errors they return give each id as the stored id's 64 bits (N in 48,
// hhhh in 16) enciphered with triple DES (crypto/des) under a key kept in
// the journal's folder (idKeyName, made at the first Open): 16 hex
// digits, which say nothing of N without the key. Content and Plan take
// either form.

// idKeyName holds the key ids are shown enciphered with.
const idKeyName = "idkey"

// openIDKey reads the key, making it at the first open.
func (j *Journal) openIDKey() error {
	p := filepath.Join(j.dir, idKeyName)
	key, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		key = make([]byte, 24)
		rand.Read(key)
		if err := writeFileSynced(j.dir, idKeyName, key); err != nil {
			return fmt.Errorf("journal: %w", err)
		}
	} else if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	if len(key) != 24 {
		return fmt.Errorf("journal: %s holds %d bytes, not a key of 24", p, len(key))
	}
	j.ids, err = des.NewTripleDESCipher(key)
	if err != nil {
		return fmt.Errorf("journal: %s: %w", p, err)
	}
	return nil
}

// writeFileSynced writes name in dir (mode 0600) through a temp file
// renamed over it, synced with its folder.
func writeFileSynced(dir, name string, b []byte) error {
	tmp := filepath.Join(dir, tmpPrefix+name)
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
		err = os.Rename(tmp, filepath.Join(dir, name))
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

// shownID is the id stored as id, as callers see it.
func shownID(c cipher.Block, id string) string {
	seqs, suffix, ok := strings.Cut(id, "-")
	seq, err := strconv.ParseUint(seqs, 10, 64)
	s, serr := strconv.ParseUint(suffix, 16, 16)
	if c == nil || !ok || err != nil || serr != nil || seq >= 1<<48 || len(suffix) != 4 {
		return id
	}
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], seq<<16|s)
	c.Encrypt(b[:], b[:])
	return hex.EncodeToString(b[:])
}

// storedID is the stored id of an id a caller gives, in either form.
func storedID(c cipher.Block, id string) string {
	if c == nil || len(id) != 16 {
		return id
	}
	var b [8]byte
	if _, err := hex.Decode(b[:], []byte(id)); err != nil {
		return id
	}
	c.Decrypt(b[:], b[:])
	v := binary.BigEndian.Uint64(b[:])
	return fmt.Sprintf("%d-%04x", v>>16, v&0xffff)
}

// shown is r with its id as callers see it.
func (j *Journal) shown(r Record) Record {
	r.ID = shownID(j.ids, r.ID)
	return r
}

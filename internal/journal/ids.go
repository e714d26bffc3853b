package journal

import (
	"crypto/cipher"
	"crypto/des"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/neuralis/neuralisfs/internal/secretkey"
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
	key, err := secretkey.Load(p, 24)
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	j.ids, err = des.NewTripleDESCipher(key)
	if err != nil {
		return fmt.Errorf("journal: %s: %w", p, err)
	}
	return nil
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

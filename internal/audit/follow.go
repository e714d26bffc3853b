package audit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"
)

// pollInterval is how often Follow looks for new lines and rotation.
const pollInterval = 100 * time.Millisecond

// Follow copies the audit log at path to w: first the rotated-out
// path+".1" (when present), then path. With follow set it keeps going,
// printing lines as they are appended and carrying on into the new file
// when the log rotates, until ctx is done (which returns nil). Only whole
// lines are copied. Without follow, a missing log is an error wrapping
// os.ErrNotExist; with follow, Follow waits for it to appear.
func Follow(ctx context.Context, path string, w io.Writer, follow bool) error {
	if old, err := os.ReadFile(path + ".1"); err == nil {
		if i := bytes.LastIndexByte(old, '\n'); i >= 0 {
			if _, err := w.Write(old[:i+1]); err != nil {
				return err
			}
		}
	}
	f, err := os.Open(path)
	if err != nil && (!follow || !errors.Is(err, os.ErrNotExist)) {
		return fmt.Errorf("audit log %s: %w", path, err)
	}
	defer func() {
		if f != nil {
			f.Close()
		}
	}()
	var pending []byte // a partial last line, held until its newline arrives
	buf := make([]byte, 64<<10)
	// drain copies everything readable from f to w.
	drain := func() error {
		for {
			n, err := f.Read(buf)
			if n > 0 {
				pending = append(pending, buf[:n]...)
				if i := bytes.LastIndexByte(pending, '\n'); i >= 0 {
					if _, werr := w.Write(pending[:i+1]); werr != nil {
						return werr
					}
					pending = append(pending[:0], pending[i+1:]...)
				}
			}
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return fmt.Errorf("audit log %s: %w", path, err)
			}
		}
	}
	if f != nil {
		if err := drain(); err != nil {
			return err
		}
	}
	if !follow {
		return nil
	}
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		if f == nil {
			if f, err = os.Open(path); err != nil {
				f = nil
				continue
			}
		}
		if err := drain(); err != nil {
			return err
		}
		// Rotated (a different file at path) or truncated: the old file was
		// read to its end above; start the new one from the top.
		cur, err := os.Stat(path)
		if err != nil {
			continue // between rename and create
		}
		mine, err := f.Stat()
		if err != nil {
			return fmt.Errorf("audit log %s: %w", path, err)
		}
		pos, _ := f.Seek(0, io.SeekCurrent)
		if !os.SameFile(cur, mine) || cur.Size() < pos {
			if err := drain(); err != nil { // lines written just before the rename
				return err
			}
			f.Close()
			f, pending = nil, pending[:0]
			if f, err = os.Open(path); err != nil {
				f = nil
				continue
			}
			if err := drain(); err != nil {
				return err
			}
		}
	}
}

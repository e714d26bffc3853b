package held

import (
	"errors"
	"hash"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// copySparse copies src to dst, both at offset 0, and returns the length
// copied. Only src's data is written (SEEK_DATA, SEEK_HOLE): its holes
// stay holes in dst, which ends at src's length. A file of 50 GB an agent
// made with one truncate is one hole, and copying it into the layer, or
// approving it into the backing folder, writes none of it. When h is not
// nil it is given all of src, the holes as the zeros they read as.
//
// A filesystem without SEEK_DATA of its own answers as if src were all
// data (the kernel's generic lseek), and one that refuses it (EINVAL,
// EOPNOTSUPP, ENOSYS) is copied whole: either way the copy is a plain
// one.
func copySparse(dst, src *os.File, h hash.Hash) (int64, error) {
	var off int64
	for {
		data, err := unix.Seek(int(src.Fd()), off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // nothing but a hole to the end
		}
		if off == 0 && (errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS)) {
			return copyPlain(dst, src, h) // a file that cannot tell its holes
		}
		if err != nil {
			return 0, err
		}
		hole, err := unix.Seek(int(src.Fd()), data, unix.SEEK_HOLE)
		if err != nil {
			return 0, err
		}
		zeros(h, data-off)
		if _, err := src.Seek(data, io.SeekStart); err != nil {
			return 0, err
		}
		if _, err := dst.Seek(data, io.SeekStart); err != nil {
			return 0, err
		}
		n, err := io.CopyN(hashing(dst, h), src, hole-data)
		off = data + n
		if err == io.EOF {
			break // the file shrank while being copied
		}
		if err != nil {
			return 0, err
		}
	}
	// The length a hole at the end gives (or the file has now, had it
	// shrunk): read to the end for the digest.
	end, err := src.Seek(0, io.SeekEnd)
	if err != nil {
		return 0, err
	}
	if end < off {
		end = off
	}
	zeros(h, end-off)
	if err := dst.Truncate(end); err != nil {
		return 0, err
	}
	if _, err := dst.Seek(end, io.SeekStart); err != nil {
		return 0, err
	}
	return end, nil
}

// copyPlain is copySparse for a source whose holes cannot be found: all
// of it is copied.
func copyPlain(dst, src *os.File, h hash.Hash) (int64, error) {
	if _, err := src.Seek(0, io.SeekStart); err != nil {
		return 0, err
	}
	return io.Copy(hashing(dst, h), src)
}

// hashing is dst, or dst and h when h is not nil. dst alone stays an
// *os.File, which io.Copy gives to copy_file_range where it can.
func hashing(dst *os.File, h hash.Hash) io.Writer {
	if h == nil {
		return dst
	}
	return io.MultiWriter(dst, h)
}

// zeros gives h n zero bytes (nothing when h is nil).
func zeros(h hash.Hash, n int64) {
	if h == nil {
		return
	}
	var z [64 << 10]byte
	for n > 0 {
		k := min(n, int64(len(z)))
		h.Write(z[:k])
		n -= k
	}
}

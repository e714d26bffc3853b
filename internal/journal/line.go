package journal

import (
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/neuralis/neuralisfs/internal/rawname"
)

// The lines Keep and the publisher write for every change are built by
// hand: encoding/json's reflection cost several microseconds a line.
// They are byte for byte what json.Marshal writes (TestLinesAsJSON), and
// replay reads them with encoding/json.

// appendRecordLine appends json.Marshal(r) (names as rawname.Enc keeps
// them, see Record.MarshalJSON) and a newline to b.
func appendRecordLine(b []byte, r *Record) []byte {
	return append(appendRecord(b, r), '\n')
}

// appendStagedLine appends the staged line of r (see stagedLine) and a
// newline to b.
func appendStagedLine(b []byte, r *Record) []byte {
	if b == nil {
		b = make([]byte, 0, 260+len(r.URI)+len(r.From)+len(r.Principal))
	}
	b = append(b, `{"staged":`...)
	b = appendString(b, r.staged)
	if r.linked {
		b = append(b, `,"linked":true`...)
	}
	if r.logOff != 0 {
		b = append(b, `,"offset":`...)
		b = strconv.AppendInt(b, r.logOff, 10)
	}
	if r.logCRC != 0 {
		b = append(b, `,"crc":`...)
		b = strconv.AppendUint(b, uint64(r.logCRC), 10)
	}
	b = append(b, `,"record":`...)
	b = appendRecord(b, r)
	return append(b, '}', '\n')
}

func appendRecord(b []byte, r *Record) []byte {
	if b == nil {
		b = make([]byte, 0, 200+len(r.URI)+len(r.From)+len(r.Principal))
	}
	b = append(b, `{"id":`...)
	b = appendString(b, r.ID)
	b = append(b, `,"time":"`...)
	b = r.Time.AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","principal":`...)
	b = appendString(b, r.Principal)
	b = append(b, `,"uid":`...)
	b = strconv.AppendUint(b, uint64(r.UID), 10)
	b = append(b, `,"pid":`...)
	b = strconv.AppendUint(b, uint64(r.PID), 10)
	b = append(b, `,"op":`...)
	b = appendString(b, r.Op)
	b = append(b, `,"uri":`...)
	b = appendString(b, rawname.Enc(r.URI))
	if r.From != "" {
		b = append(b, `,"from":`...)
		b = appendString(b, rawname.Enc(r.From))
	}
	b = append(b, `,"before":`...)
	b = appendString(b, r.Before)
	b = append(b, `,"mode":`...)
	b = strconv.AppendUint(b, uint64(r.Mode), 10)
	b = append(b, `,"size":`...)
	b = strconv.AppendInt(b, r.Size, 10)
	if r.Owner != nil {
		b = append(b, `,"owner":{"uid":`...)
		b = strconv.AppendUint(b, uint64(r.Owner.UID), 10)
		b = append(b, `,"gid":`...)
		b = strconv.AppendUint(b, uint64(r.Owner.GID), 10)
		b = append(b, '}')
	}
	if r.Kept {
		b = append(b, `,"kept":true}`...)
	} else {
		b = append(b, `,"kept":false}`...)
	}
	return b
}

// appendString appends s as encoding/json writes a string (HTML-safe, with
// invalid UTF-8 as U+FFFD and U+2028, U+2029 escaped).
func appendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		c, size := utf8.DecodeRuneInString(s[i:])
		if c == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if c == '\u2028' || c == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[c&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

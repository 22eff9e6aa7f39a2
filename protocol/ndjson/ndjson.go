// Package ndjson reads and names the bodies of the function protocol's duplex mode: one
// JSON value per line (docs/protocol.md, "The duplex mode"). The gateway and the Go SDK
// share it, as they share the wire types.
package ndjson

import (
	"bufio"
	"errors"
	"mime"
)

// ContentType is the content type of a duplex invocation's two bodies.
const ContentType = "application/x-ndjson"

// Is says whether contentType (a Content-Type header's value) is ContentType.
func Is(contentType string) bool {
	mt, _, _ := mime.ParseMediaType(contentType)
	return mt == ContentType
}

// ErrTooLong is a line longer than its bound.
var ErrTooLong = errors.New("ndjson: a line longer than its bound")

// ReadLine returns the next line of r without its newline, of at most limit bytes (else
// ErrTooLong). At the end of the input it returns what was left with the reader's error
// (io.EOF alone when nothing was). A line that fits r's buffer is a slice of it, valid
// until r's next read: the caller decodes it first, or copies it.
func ReadLine(r *bufio.Reader, limit int64) ([]byte, error) {
	line, err := r.ReadSlice('\n')
	switch {
	case err == nil:
		return line[:len(line)-1], nil
	case !errors.Is(err, bufio.ErrBufferFull):
		return line, err
	}
	buf := append([]byte(nil), line...)
	for {
		line, err = r.ReadSlice('\n')
		if int64(len(buf)+len(line)) > limit+1 {
			return buf, ErrTooLong
		}
		buf = append(buf, line...)
		switch {
		case err == nil:
			return buf[:len(buf)-1], nil
		case !errors.Is(err, bufio.ErrBufferFull):
			return buf, err
		}
	}
}

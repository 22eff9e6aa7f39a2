package ndjson

import (
	"bufio"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestReadLine(t *testing.T) {
	long := strings.Repeat("x", 100)
	r := bufio.NewReaderSize(strings.NewReader("a\n"+long+"\n"+long+"x\nend"), 16)
	for _, want := range []string{"a", long} {
		got, err := ReadLine(r, 100)
		if err != nil || string(got) != want {
			t.Fatalf("ReadLine = %q, %v; want %q", got, err, want)
		}
	}
	if _, err := ReadLine(r, 100); !errors.Is(err, ErrTooLong) {
		t.Fatalf("a line of 101 bytes past a bound of 100: %v, want ErrTooLong", err)
	}
	r = bufio.NewReader(strings.NewReader("end"))
	if got, err := ReadLine(r, 100); string(got) != "end" || !errors.Is(err, io.EOF) {
		t.Fatalf("the last line without a newline: %q, %v", got, err)
	}
	if !Is("application/x-ndjson; charset=utf-8") || Is("application/json") {
		t.Fatal("Is")
	}
}

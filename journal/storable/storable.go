// Package storable says whether Postgres can store a value: valid JSON in a jsonb column,
// a Go string in a text column, checked before a write ([CheckJSON], [CheckText]), and a
// write's refusal translated after it ([Translate]); each is an [ErrUnstorable], which
// callers answer as a client's mistake.
package storable

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgconn"
)

// ErrUnstorable is wrapped by the errors of [CheckJSON] and [CheckText], and of writes that
// Postgres refused for a value it cannot store in its column although the value is valid
// JSON or a valid Go string: callers answer it as a client's mistake.
var ErrUnstorable = errors.New("journal: value cannot be stored")

// Limits of Postgres that valid JSON can exceed, found by experiment on Postgres 15 and
// fixed by the on-disk formats of numeric and jsonb.
const (
	// maxJSONDepth is how deeply [CheckJSON] lets arrays and objects nest. With the
	// default max_stack_depth (2MB), Postgres parses about 14500 nested arrays or 13000
	// nested objects before "stack depth limit exceeded"; jsonb containment (@>) and
	// other recursive operators need stack too, and max_stack_depth may be set lower,
	// so the bound keeps a wide margin.
	maxJSONDepth = 1000

	// A numeric's weight is an int16 counting groups of 4 decimal digits, so its first
	// nonzero digit may stand at most at 10^131071 (131072 digits before the point).
	maxNumericExp10 = 4*32768 - 1
	// A numeric's display scale (digits after the point, trailing zeros included, as
	// written) has 14 bits.
	maxNumericScale = 1<<14 - 1
	// numeric_in refuses an exponent of INT_MAX/2 or beyond, whatever the digits (even
	// 0e1073741823).
	maxNumericExponent = 1<<30 - 2
)

// storeError is an [ErrUnstorable] whose message is a phrase without a subject, such as
// "contains the escape \u0000 at byte 8, which Postgres cannot store", for callers to
// prefix with what the value is: fmt.Errorf("input %w", err).
type storeError struct {
	msg string
	pg  *pgconn.PgError // the refusal, when it came from Postgres
}

func (e *storeError) Error() string { return e.msg }

func (e *storeError) Unwrap() []error {
	if e.pg == nil {
		return []error{ErrUnstorable}
	}
	return []error{ErrUnstorable, e.pg}
}

func refuse(format string, args ...any) error {
	return &storeError{msg: fmt.Sprintf(format, args...)}
}

// CheckJSON reports whether raw, valid JSON, can be stored in a jsonb column: it returns
// nil when Postgres accepts raw, and otherwise an error wrapping [ErrUnstorable] whose
// message is a phrase fit for an API error, prefixed by what raw is (fmt.Errorf("input
// %w", err)), naming the first offence and its byte offset:
//
//   - contains the escape \u0000 at byte 8, which Postgres cannot store
//   - contains an unpaired UTF-16 surrogate escape \ud800 at byte 8
//   - is not valid UTF-8 at byte 8
//   - has a number with an exponent beyond what Postgres can store at byte 8
//   - has a number with more than 131072 digits before the decimal point at byte 8
//   - has a number with more than 16383 digits after the decimal point at byte 8
//   - nests deeper than 1000 levels at byte 8
//
// Its verdict is that of Postgres (15, in a UTF8 database), except that it refuses raw
// nesting deeper than 1000 levels, which Postgres may parse but needs stack for.
//
// CheckJSON does not check that raw is valid JSON (see [encoding/json.Valid]); on invalid JSON its
// verdict means nothing, but it returns. It reads raw once and does not allocate unless it
// refuses.
func CheckJSON(raw []byte) error {
	depth := 0
	for i := 0; i < len(raw); {
		switch c := raw[i]; {
		case c == '"':
			next, err := checkString(raw, i+1)
			if err != nil {
				return err
			}
			i = next
		case c == '[' || c == '{':
			depth++
			if depth > maxJSONDepth {
				return refuse("nests deeper than %d levels at byte %d", maxJSONDepth, i)
			}
			i++
		case c == ']' || c == '}':
			depth--
			i++
		case c == '-' || '0' <= c && c <= '9':
			next, err := checkNumber(raw, i)
			if err != nil {
				return err
			}
			i = next
		default: // whitespace, separators, literals
			i++
		}
	}
	return nil
}

// stringStop marks the bytes at which the scan of a JSON string's content stops: the
// closing quote, a backslash, and the bytes of multibyte UTF-8 sequences.
var stringStop = func() (t [256]bool) {
	t['"'], t['\\'] = true, true
	for c := utf8.RuneSelf; c < 256; c++ {
		t[c] = true
	}
	return t
}()

// checkString checks the content of the string that starts at raw[i], after its opening
// quote, and returns the index after its closing quote. Postgres decodes every escape of
// a jsonb string, keys included, and refuses \u0000 and a surrogate escape that is not a
// high one directly followed by a low one.
func checkString(raw []byte, i int) (int, error) {
	for i < len(raw) {
		c := raw[i]
		if !stringStop[c] {
			i++
			continue
		}
		switch {
		case c == '"':
			return i + 1, nil
		case c >= utf8.RuneSelf:
			r, size := utf8.DecodeRune(raw[i:])
			if r == utf8.RuneError && size == 1 {
				return 0, refuse("is not valid UTF-8 at byte %d", i)
			}
			i += size
		case i+1 < len(raw) && raw[i+1] == 'u':
			cp := hex4(raw, i+2)
			switch {
			case cp == 0:
				return 0, refuse(`contains the escape \u0000 at byte %d, which Postgres cannot store`, i)
			case 0xD800 <= cp && cp <= 0xDBFF:
				if i+11 < len(raw) && raw[i+6] == '\\' && raw[i+7] == 'u' {
					if low := hex4(raw, i+8); 0xDC00 <= low && low <= 0xDFFF {
						i += 12
						continue
					}
				}
				return 0, refuse("contains an unpaired UTF-16 surrogate escape %s at byte %d", raw[i:i+6], i)
			case 0xDC00 <= cp && cp <= 0xDFFF:
				return 0, refuse("contains an unpaired UTF-16 surrogate escape %s at byte %d", raw[i:i+6], i)
			}
			i += 6
		default: // a two-byte escape, \\ and \" included
			i += 2
		}
	}
	return len(raw), nil
}

// hex4 returns the value of the 4 hex digits at raw[i:], or -1 if there are not 4.
func hex4(raw []byte, i int) int {
	if i+4 > len(raw) {
		return -1
	}
	v := 0
	for _, c := range raw[i : i+4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return -1
		}
		v = v<<4 | int(c)
	}
	return v
}

// checkNumber checks the JSON number at raw[start:] against the limits of Postgres's
// numeric, which jsonb stores numbers as, and returns the index after it.
func checkNumber(raw []byte, start int) (int, error) {
	i := start
	if i < len(raw) && raw[i] == '-' {
		i++
	}
	// The digits as written, and the power of ten of the first nonzero one.
	intDigits, fracDigits := 0, 0
	firstNonzero := -1 // index among all the digits
	for i < len(raw) && '0' <= raw[i] && raw[i] <= '9' {
		if firstNonzero < 0 && raw[i] != '0' {
			firstNonzero = intDigits
		}
		intDigits++
		i++
	}
	if i < len(raw) && raw[i] == '.' {
		i++
		for i < len(raw) && '0' <= raw[i] && raw[i] <= '9' {
			if firstNonzero < 0 && raw[i] != '0' {
				firstNonzero = intDigits + fracDigits
			}
			fracDigits++
			i++
		}
	}
	exp := 0
	if i < len(raw) && (raw[i] == 'e' || raw[i] == 'E') {
		i++
		neg := false
		if i < len(raw) && (raw[i] == '+' || raw[i] == '-') {
			neg = raw[i] == '-'
			i++
		}
		for i < len(raw) && '0' <= raw[i] && raw[i] <= '9' {
			if exp <= maxNumericExponent { // saturate: leading zeros are allowed
				exp = exp*10 + int(raw[i]-'0')
			}
			i++
		}
		if exp > maxNumericExponent {
			return 0, refuse("has a number with an exponent beyond what Postgres can store at byte %d", start)
		}
		if neg {
			exp = -exp
		}
	}
	if fracDigits-exp > maxNumericScale {
		return 0, refuse("has a number with more than %d digits after the decimal point at byte %d", maxNumericScale, start)
	}
	if firstNonzero >= 0 && intDigits-1-firstNonzero+exp > maxNumericExp10 {
		return 0, refuse("has a number with more than %d digits before the decimal point at byte %d", maxNumericExp10+1, start)
	}
	if i == start { // not a number: invalid JSON, but move on
		i++
	}
	return i, nil
}

// CheckText reports whether s can be stored in a text column: it returns nil when s is
// valid UTF-8 without a NUL byte, and otherwise an error wrapping [ErrUnstorable] whose
// message is a phrase such as "contains a NUL byte at byte 3, which Postgres cannot
// store" or "is not valid UTF-8 at byte 3", for callers to prefix with what s is.
func CheckText(s string) error {
	if i := strings.IndexByte(s, 0); i >= 0 {
		// An invalid sequence before the NUL is the first offence.
		if j := invalidUTF8(s[:i]); j >= 0 {
			return refuse("is not valid UTF-8 at byte %d", j)
		}
		return refuse("contains a NUL byte at byte %d, which Postgres cannot store", i)
	}
	if j := invalidUTF8(s); j >= 0 {
		return refuse("is not valid UTF-8 at byte %d", j)
	}
	return nil
}

// invalidUTF8 returns the offset of the first invalid UTF-8 sequence in s, or -1.
func invalidUTF8(s string) int {
	if utf8.ValidString(s) {
		return -1
	}
	for i, r := range s {
		if r == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(s[i:]); size == 1 {
				return i
			}
		}
	}
	return -1
}

// unstorableCodes are the SQLSTATEs of Postgres refusing a value for what it is, not
// for the statement or the state of the database.
var unstorableCodes = map[string]bool{
	"22P05": true, // untranslatable_character: \u0000 in jsonb
	"22021": true, // character_not_in_repertoire: invalid UTF-8, a NUL byte in text
	"22003": true, // numeric_value_out_of_range: a jsonb number beyond numeric
	"22P02": true, // invalid_text_representation, from jsonb input only (see below)
	"54000": true, // program_limit_exceeded: a key too long for its index, a jsonb too large
	"54001": true, // statement_too_complex: jsonb nested beyond the stack
}

// maxPgMessage bounds the Postgres message quoted in an unstorable error, as some
// messages quote the value.
const maxPgMessage = 200

// Translate returns err translated to an error wrapping [ErrUnstorable] and the
// *pgconn.PgError if Postgres refused a value that it cannot store (a \u0000 or an
// unpaired surrogate in jsonb, a number beyond numeric, jsonb nested too deeply, invalid
// UTF-8, a NUL byte, a key too long for its index), and err unchanged otherwise, nil
// included. Its message quotes Postgres's message and detail, shortened.
func Translate(err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || !unstorableCodes[pgErr.Code] {
		return err
	}
	// The type name is an untranslated argument of "invalid input syntax for type %s";
	// jsonb reports its own syntax errors as type json, and its numbers' as numeric.
	if pgErr.Code == "22P02" && !strings.Contains(pgErr.Message, "json") && !strings.Contains(pgErr.Message, "numeric") {
		return err
	}
	msg := pgErr.Message
	if pgErr.Detail != "" {
		msg += ": " + pgErr.Detail
	}
	return &storeError{msg: "Postgres cannot store the value: " + shorten(msg, maxPgMessage), pg: pgErr}
}

// shorten returns s cut to at most n bytes, on a rune boundary, marked with an ellipsis.
func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

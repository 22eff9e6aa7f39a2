package storable_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/internal/wiring/pgtest"
	"github.com/stepgate/stepgate/journal/storable"
)

// storableCase is a valid JSON document, what storable.CheckJSON says of it and what Postgres does.
type storableCase struct {
	name string
	json string
	want string // a part of storable.CheckJSON's error, "" if it accepts
	code string // the SQLSTATE of Postgres's refusal, "" if it accepts
	// storable.CheckJSON refuses, deliberately, what Postgres would accept.
	conservative bool
	// encoding/json refuses it, as it nests beyond 10000 levels.
	goRefuses bool
}

// storableCases are the documents of TestCheckJSON, which seed FuzzCheckJSON too.
func storableCases() []storableCase {
	nest := func(n int, open, leaf, close string) string {
		return strings.Repeat(open, n) + leaf + strings.Repeat(close, n)
	}
	const (
		zero      = `\u0000`
		unpaired  = "unpaired UTF-16 surrogate"
		badUTF8   = "not valid UTF-8"
		exponent  = "exponent beyond"
		before    = "more than 131072 digits before the decimal point"
		after     = "more than 16383 digits after the decimal point"
		tooDeep   = "nests deeper than 1000 levels"
		escape    = "22P05" // untranslatable_character
		syntax    = "22P02" // invalid_text_representation
		encoding  = "22021" // character_not_in_repertoire
		overflow  = "22003" // numeric_value_out_of_range
		stackSize = "54001" // statement_too_complex
	)
	return []storableCase{
		// Documents Postgres stores.
		{name: "Object", json: `{"id":"r1","input":{"n":1,"tags":["a","b"]},"ok":true,"none":null}`},
		{name: "Literals", json: `[true,false,null,"",0,-0,-0.0e5,{},[]]`},
		{name: "Whitespace", json: " \t\r\n{ \"a\" :\n[ 1 ,\t2 ] }\r\n "},
		{name: "UnicodeText", json: `{"name":"Zoë 日本 😀","€":"\u20ac"}`},
		{name: "NestedEscapes", json: `{"a":"line\nbreak \"quoted\" \\ back \/ slash \t\b\f\r","b":["\"","\\"]}`},
		{name: "EscapedNonASCII", json: `"\u00e9\u65E5\uFFFF\uFFFE\u0001\u001f"`},
		{name: "SurrogatePair", json: `"\ud83d\ude00"`},
		{name: "SurrogatePairUpperCase", json: `{"\uD83D\uDE00":"x\uD83D\uDE00y"}`},
		{name: "LastSurrogatePair", json: `"\udbff\udfff\ud800\udc00"`},
		{name: "EscapedBackslashBeforeU0000", json: `"\\u0000"`},
		{name: "TwoEscapedBackslashesBeforeU0000", json: `{"\\\\u0000":"\\\\u0000"}`},
		{name: "EscapedQuoteBeforeU0000", json: `"\"u0000"`},
		{name: "EscapedBackslashBeforeUD800", json: `"\\ud800"`},
		{name: "BracketsInStrings", json: `{"[[[[":"{{{{","]]":"}}}}"}`},
		{name: "ManyBracketsInAString", json: `"` + strings.Repeat("[{", 5000) + `"`},
		{name: "ManyShallowArrays", json: "[" + strings.Repeat("[[]],", 5000) + "[]]"},
		{name: "ArraysAtDepthLimit", json: nest(1000, "[", "1", "]")},
		{name: "ObjectsAtDepthLimit", json: nest(1000, `{"a":`, "1", "}")},
		{name: "MixedAtDepthLimit", json: nest(500, `{"a":[`, `"\ud83d\ude00"`, "]}")},
		{name: "LargestExponentOfOne", json: `1e131071`},
		{name: "LargestExponentNegative", json: `[-9.99E+131071]`},
		{name: "DigitsBeforePointAtLimit", json: strings.Repeat("9", 131072)},
		{name: "FractionShiftedToLimit", json: `0.01e131073`},
		{name: "ExponentWithLeadingZeros", json: `1e000000000000000000000005`},
		{name: "ZeroWithLargestExponent", json: `0e1073741822`},
		{name: "SmallestScale", json: `1e-16383`},
		{name: "FractionAtScaleLimit", json: `1.5e-16382`},
		{name: "ZerosAtScaleLimit", json: "0." + strings.Repeat("0", 16383)},
		{name: "LongFractionWithExponent", json: "0." + strings.Repeat("1", 20000) + "e10000"},
		{name: "LongFractionScaledUp", json: "1." + strings.Repeat("0", 20000) + "e5000"},

		// \u0000, wherever it is.
		{name: "U0000InValue", json: `{"a":"x\u0000"}`, want: zero, code: escape},
		{name: "U0000InKey", json: `{"\u0000":1}`, want: zero, code: escape},
		{name: "U0000InNestedKey", json: `[{"a":{"b\u0000c":[]}}]`, want: zero, code: escape},
		{name: "U0000AfterEscapedBackslash", json: `"\\\u0000"`, want: zero, code: escape},
		{name: "U0000AfterEscapedQuote", json: `"\"\u0000"`, want: zero, code: escape},
		{name: "U0000BeforeSurrogate", json: `"\u0000\ud800"`, want: zero, code: escape},

		// Surrogates out of pairs.
		{name: "LoneHigh", json: `"\ud800"`, want: unpaired + ` escape \ud800`, code: syntax},
		{name: "LoneLow", json: `"\udc00"`, want: unpaired + ` escape \udc00`, code: syntax},
		{name: "LoneLowUpperCase", json: `{"k":"\uDFFF"}`, want: unpaired + ` escape \uDFFF`, code: syntax},
		{name: "HighThenText", json: `"\ud800x"`, want: unpaired, code: syntax},
		{name: "HighThenNonASCII", json: `"\ud800é"`, want: unpaired, code: syntax},
		{name: "HighThenEscape", json: `"\ud800\n"`, want: unpaired, code: syntax},
		{name: "HighThenBMPEscape", json: `"\ud800\u0041"`, want: unpaired, code: syntax},
		{name: "HighThenU0000", json: `"\ud800\u0000"`, want: unpaired, code: syntax},
		{name: "HighThenHigh", json: `"\ud800\ud800\udc00"`, want: unpaired, code: syntax},
		{name: "HighThenEscapedBackslash", json: `"\ud800\\udc00"`, want: unpaired, code: syntax},
		{name: "HighAtEnd", json: `["\udbff"]`, want: unpaired, code: syntax},
		{name: "LowThenHigh", json: `"\udc00\ud800"`, want: unpaired + ` escape \udc00`, code: syntax},
		{name: "LoneSurrogateInKey", json: `{"\ud83d":1}`, want: unpaired, code: syntax},
		{name: "PairThenLoneLow", json: `"\ud83d\ude00\ude00"`, want: unpaired, code: syntax},

		// Bytes that are not UTF-8, which encoding/json lets through.
		{name: "InvalidByte", json: "\"\xff\"", want: badUTF8, code: encoding},
		{name: "TruncatedSequence", json: "{\"a\":\"\xe6\x97\"}", want: badUTF8, code: encoding},
		{name: "EncodedSurrogate", json: "\"\xed\xa0\x80\"", want: badUTF8, code: encoding},
		{name: "Overlong", json: "\"\xc0\xaf\"", want: badUTF8, code: encoding},
		{name: "BeyondUnicode", json: "\"\xf4\x90\x80\x80\"", want: badUTF8, code: encoding},

		// Numbers beyond numeric.
		{name: "HugeExponent", json: `1e1000000`, want: before, code: overflow},
		{name: "ExponentOneTooLarge", json: `1e131072`, want: before, code: overflow},
		{name: "NegativeExponentOneTooLarge", json: `-1E+131072`, want: before, code: overflow},
		{name: "FractionShiftedBeyond", json: `0.001e131076`, want: before, code: overflow},
		{name: "DigitsBeforePointBeyond", json: "1" + strings.Repeat("0", 131072), want: before, code: overflow},
		{name: "ZeroWithExponentBeyond", json: `0e1073741823`, want: exponent, code: overflow},
		{name: "ExponentBeyondInt32", json: `{"n":1e2147483648}`, want: exponent, code: overflow},
		{name: "ExponentOf20Digits", json: `1e99999999999999999999`, want: exponent, code: overflow},
		{name: "NegativeExponentBeyond", json: `1e-1073741823`, want: exponent, code: overflow},
		{name: "ScaleOneTooLarge", json: `1e-16384`, want: after, code: overflow},
		{name: "ZeroScaleOneTooLarge", json: `0e-16384`, want: after, code: overflow},
		{name: "FractionScaleOneTooLarge", json: `1.5e-16383`, want: after, code: overflow},
		{name: "TrailingZerosBeyondScale", json: "[0." + strings.Repeat("0", 16384) + "]", want: after, code: overflow},

		// Nesting.
		{name: "ArraysBeyondDepthLimit", json: nest(1001, "[", "", "]"), want: tooDeep, conservative: true},
		{name: "ObjectsBeyondDepthLimit", json: nest(1001, `{"a":`, "1", "}"), want: tooDeep, conservative: true},
		{name: "ArraysBeyondStack", json: nest(20000, "[", "", "]"), want: tooDeep, code: stackSize, goRefuses: true},
		{name: "ObjectsBeyondStack", json: nest(20000, `{"a":`, "1", "}"), want: tooDeep, code: stackSize, goRefuses: true},
	}
}

func TestCheckJSON(t *testing.T) {
	t.Parallel()

	for _, c := range storableCases() {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			raw := []byte(c.json)
			require.Equal(t, !c.goRefuses, json.Valid(raw), "a case must be valid JSON")

			err := storable.CheckJSON(raw)
			if c.want == "" {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, storable.ErrUnstorable)
				require.ErrorContains(t, err, c.want)
			}

			tx := pgtest.Tx(t)
			pgErr := jsonbRefusal(t, tx, c.json)
			if c.conservative {
				t.Logf("Postgres's verdict: %v", pgErr)
				return
			}
			if c.code == "" {
				require.Nil(t, pgErr, "Postgres must store what storable.CheckJSON accepts")
				return
			}
			require.NotNil(t, pgErr, "Postgres must refuse what storable.CheckJSON refuses")
			require.Equal(t, c.code, pgErr.Code, "%v", pgErr)
			require.ErrorIs(t, storable.Translate(pgErr), storable.ErrUnstorable)
		})
	}

	t.Run("ErrorNamesTheOffence", func(t *testing.T) {
		t.Parallel()
		err := storable.CheckJSON([]byte(`{"a":"b\u0000"}`))
		require.EqualError(t, err, `contains the escape \u0000 at byte 7, which Postgres cannot store`)
		require.EqualError(t, fmt.Errorf("input %w", err), `input contains the escape \u0000 at byte 7, which Postgres cannot store`)
		err = storable.CheckJSON([]byte(`["x", "\ud800"]`))
		require.EqualError(t, err, `contains an unpaired UTF-16 surrogate escape \ud800 at byte 7`)
		err = storable.CheckJSON([]byte(`[1, -2.5e131072]`))
		require.EqualError(t, err, `has a number with more than 131072 digits before the decimal point at byte 4`)
		var pgErr *pgconn.PgError
		require.False(t, errors.As(err, &pgErr))
	})

	t.Run("InvalidJSONDoesNotPanic", func(t *testing.T) {
		t.Parallel()
		for _, s := range []string{
			``, `"`, `"\`, `"\u`, `"\u12`, `"\ud800`, `"\ud800\`, `"\ud800\u`, `"\ud800\udc`,
			`"\uzzzz"`, `"\ud800\uzzzz"`, `-`, `1e`, `1e+`, `.5`, `]]]]`, `}{`, `[-]`, `--1`,
			"\"\xf0\x9f\x98", `1e99999999999999999999999999999999999999`, `"\ud800"\udc00"`,
		} {
			require.NotPanics(t, func() { _ = storable.CheckJSON([]byte(s)) }, "%q", s)
		}
	})
}

// jsonbRefusal returns Postgres's error on storing doc as jsonb, nil if it accepts it.
// It tries the two ways a document reaches a jsonb column: cast from text, and as a
// jsonb argument sent in the binary format, and requires them to agree.
func jsonbRefusal(t *testing.T, tx pgx.Tx, doc string) *pgconn.PgError {
	t.Helper()
	fromText := pgRefusal(t, tx, `SELECT jsonb_typeof($1::text::jsonb)`, doc)
	asJSONB := pgRefusal(t, tx, `SELECT jsonb_typeof($1::jsonb)`, json.RawMessage(doc))
	require.Equal(t, fromText == nil, asJSONB == nil, "text: %v; jsonb: %v", fromText, asJSONB)
	if fromText != nil {
		require.Equal(t, fromText.Code, asJSONB.Code)
	}
	return fromText
}

// pgRefusal runs the query sql, of one text column, in a savepoint of tx, and returns
// the Postgres error it fails with, or nil. Other errors fail the test.
func pgRefusal(t *testing.T, tx pgx.Tx, sql string, args ...any) *pgconn.PgError {
	t.Helper()
	ctx := t.Context()
	sp, err := tx.Begin(ctx)
	require.NoError(t, err)
	defer func() { require.NoError(t, sp.Rollback(context.WithoutCancel(ctx))) }()
	var s string
	err = sp.QueryRow(ctx, sql, args...).Scan(&s)
	if err == nil {
		return nil
	}
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	return pgErr
}

// TestCheckJSONAgreesWithPostgres compares storable.CheckJSON with Postgres on random documents
// built of the pieces near Postgres's limits.
func TestCheckJSONAgreesWithPostgres(t *testing.T) {
	t.Parallel()
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	g := &docGen{r: rand.New(rand.NewPCG(seed, seed))}
	tx := pgtest.Tx(t)

	refused := 0
	for range 300 {
		var b strings.Builder
		g.value(&b, 0)
		doc := b.String()
		require.True(t, json.Valid([]byte(doc)), "%q", doc)

		err := storable.CheckJSON([]byte(doc))
		pgErr := pgRefusal(t, tx, `SELECT jsonb_typeof($1::text::jsonb)`, doc)
		if pgErr == nil {
			require.NoError(t, err, "Postgres stores %q", doc)
			continue
		}
		refused++
		require.Error(t, err, "Postgres refuses %q: %v", doc, pgErr)
		require.ErrorIs(t, storable.Translate(pgErr), storable.ErrUnstorable)
	}
	t.Logf("Postgres refused %d of 300", refused)
}

// docGen generates valid JSON documents that Postgres may or may not store.
type docGen struct{ r *rand.Rand }

var (
	genStringParts = []string{
		"abc", " ", "é", "日本", "😀", `\n`, `\"`, `\\`, `\/`, `\t`, `\u0041`, `\u00e9`, `\uFFFF`,
		`\ud83d\ude00`, `\uD83D\uDE00`, `\\u0000`, `\\\\`, `\\ud800`, "[", "{",
		// Refused by Postgres.
		`\u0000`, `\ud800`, `\udc00`, `\uDBFF`, "\xff", "\xed\xa0\x80",
	}
	genMantissas = []string{"0", "1", "-1", "12.5", "0.000", "-0.0", "9.99", "0.01", "123456789012345678901234567890"}
	genExponents = []string{
		"", "", "", "e5", "E-3", "e+0", "e131071", "e131072", "e131073", "e-16382", "e-16383", "e-16384",
		"e1073741822", "e1073741823", "e-1073741823", "E000131070",
	}
)

// value writes a JSON value, at most 4 levels deep.
func (g *docGen) value(b *strings.Builder, depth int) {
	switch n := g.r.IntN(10); {
	case n < 2 && depth < 4:
		b.WriteByte('{')
		for i := range g.r.IntN(4) {
			if i > 0 {
				b.WriteByte(',')
			}
			g.str(b)
			b.WriteByte(':')
			g.value(b, depth+1)
		}
		b.WriteByte('}')
	case n < 4 && depth < 4:
		b.WriteByte('[')
		for i := range g.r.IntN(4) {
			if i > 0 {
				b.WriteString(", ")
			}
			g.value(b, depth+1)
		}
		b.WriteByte(']')
	case n < 7:
		g.str(b)
	case n < 9:
		b.WriteString(genMantissas[g.r.IntN(len(genMantissas))])
		b.WriteString(genExponents[g.r.IntN(len(genExponents))])
	default:
		b.WriteString([]string{"true", "false", "null"}[g.r.IntN(3)])
	}
}

// str writes a JSON string, where pieces that Postgres refuses are rare enough for
// most documents to be stored.
func (g *docGen) str(b *strings.Builder) {
	b.WriteByte('"')
	for range g.r.IntN(4) {
		parts := genStringParts
		if g.r.IntN(3) > 0 {
			parts = parts[:len(parts)-6]
		}
		b.WriteString(parts[g.r.IntN(len(parts))])
	}
	b.WriteByte('"')
}

var byteOffset = regexp.MustCompile(`at byte \d+`)

func FuzzCheckJSON(f *testing.F) {
	for _, c := range storableCases() {
		f.Add([]byte(c.json))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		err := storable.CheckJSON(raw) // must not panic, even on invalid JSON
		if !json.Valid(raw) {
			return
		}
		if err != nil {
			require.ErrorIs(t, err, storable.ErrUnstorable)
		}
		verdict := func(err error) string {
			if err == nil {
				return ""
			}
			return byteOffset.ReplaceAllString(err.Error(), "at byte N")
		}

		// Whitespace changes nothing.
		var compact, indented bytes.Buffer
		require.NoError(t, json.Compact(&compact, raw))
		require.Equal(t, verdict(err), verdict(storable.CheckJSON(compact.Bytes())), "compacted")
		require.NoError(t, json.Indent(&indented, raw, "", "\t"))
		require.Equal(t, verdict(err), verdict(storable.CheckJSON(indented.Bytes())), "indented")

		// What encoding/json decodes and encodes again is as storable as what it read:
		// it keeps numbers as written and only mends strings.
		if err != nil {
			return
		}
		d := json.NewDecoder(bytes.NewReader(raw))
		d.UseNumber()
		var v any
		if d.Decode(&v) != nil { // nested beyond encoding/json's limit
			return
		}
		again, mErr := json.Marshal(v)
		require.NoError(t, mErr)
		require.NoError(t, storable.CheckJSON(again), "%s", again)
	})
}

func TestCheckText(t *testing.T) {
	t.Parallel()

	for _, c := range []struct {
		name string
		s    string
		want string // a part of storable.CheckText's error, "" if it accepts
	}{
		{name: "Empty", s: ""},
		{name: "ASCII", s: "charge-card"},
		{name: "Unicode", s: "Zoë 日本 😀"},
		{name: "Noncharacter", s: "\uFFFE\U0010FFFF"},
		{name: "EscapedNULIsText", s: `\u0000 \x00`},
		{name: "NUL", s: "a\x00b", want: "contains a NUL byte at byte 1, which Postgres cannot store"},
		{name: "OnlyNUL", s: "\x00", want: "contains a NUL byte at byte 0"},
		{name: "InvalidByte", s: "ok\xff", want: "is not valid UTF-8 at byte 2"},
		{name: "TruncatedSequence", s: "\xe6\x97", want: "is not valid UTF-8 at byte 0"},
		{name: "EncodedSurrogate", s: "x\xed\xa0\x80", want: "is not valid UTF-8 at byte 1"},
		{name: "Overlong", s: "\xc0\x80", want: "is not valid UTF-8 at byte 0"},
		{name: "BeyondUnicode", s: "\xf4\x90\x80\x80", want: "is not valid UTF-8 at byte 0"},
		{name: "InvalidBeforeNUL", s: "é\xff\x00", want: "is not valid UTF-8 at byte 2"},
		{name: "NULBeforeInvalid", s: "é\x00\xff", want: "contains a NUL byte at byte 2"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			err := storable.CheckText(c.s)
			pgErr := pgRefusal(t, pgtest.Tx(t), `SELECT $1::text`, c.s)
			if c.want == "" {
				require.NoError(t, err)
				require.Nil(t, pgErr, "Postgres must store what storable.CheckText accepts")
				return
			}
			require.ErrorIs(t, err, storable.ErrUnstorable)
			require.ErrorContains(t, err, c.want)
			require.NotNil(t, pgErr, "Postgres must refuse what storable.CheckText refuses")
			require.Equal(t, "22021", pgErr.Code, "%v", pgErr) // character_not_in_repertoire
			require.ErrorIs(t, storable.Translate(pgErr), storable.ErrUnstorable)
		})
	}
}

func TestTranslate(t *testing.T) {
	t.Parallel()

	// refusal returns Postgres's error on running sql in a new transaction, after setup.
	refusal := func(t *testing.T, setup, sql string, args ...any) *pgconn.PgError {
		t.Helper()
		tx := pgtest.Tx(t)
		if setup != "" {
			_, err := tx.Exec(t.Context(), setup)
			require.NoError(t, err)
		}
		_, err := tx.Exec(t.Context(), sql, args...)
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr)
		return pgErr
	}
	const keys = `CREATE TEMP TABLE storable_key (k text PRIMARY KEY) ON COMMIT DROP`

	for _, c := range []struct {
		name  string
		setup string
		sql   string
		args  []any
		code  string
		want  string // a part of Translate's error
	}{
		{
			name: "U0000", sql: `SELECT $1::text::jsonb`, args: []any{`{"a":"\u0000"}`}, code: "22P05",
			want: `Postgres cannot store the value: unsupported Unicode escape sequence: \u0000 cannot be converted to text.`,
		},
		{
			name: "LoneSurrogate", sql: `SELECT $1::jsonb`, args: []any{json.RawMessage(`"\ud800"`)}, code: "22P02",
			want: `invalid input syntax for type json: Unicode low surrogate must follow a high surrogate.`,
		},
		{
			name: "NumberBeyondNumeric", sql: `SELECT $1::text::jsonb`, args: []any{`[1e131072]`}, code: "22003",
			want: "value overflows numeric format",
		},
		{
			name: "DeepJSONB", sql: `SELECT $1::text::jsonb`, args: []any{strings.Repeat("[", 20000) + strings.Repeat("]", 20000)}, code: "54001",
			want: "stack depth limit exceeded",
		},
		{
			name: "NULInText", sql: `SELECT $1::text`, args: []any{"a\x00"}, code: "22021",
			want: `invalid byte sequence for encoding "UTF8": 0x00`,
		},
		{
			name: "KeyTooLongForItsIndex", setup: keys, sql: `INSERT INTO storable_key VALUES ($1)`,
			args: []any{randomText(3000)}, code: "54000", want: "exceeds btree version 4 maximum 2704",
		},
		{
			// The message quotes the value, so it is shortened.
			name: "LongNumberText", sql: `SELECT $1::text::numeric`, args: []any{strings.Repeat("x", 5000)}, code: "22P02",
			want: `invalid input syntax for type numeric: "xxxx`,
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			pgErr := refusal(t, c.setup, c.sql, c.args...)
			require.Equal(t, c.code, pgErr.Code, "%v", pgErr)

			err := storable.Translate(pgErr)
			require.ErrorIs(t, err, storable.ErrUnstorable)
			require.ErrorContains(t, err, c.want)
			require.LessOrEqual(t, len(err.Error()), len("Postgres cannot store the value: ")+storable.MaxPgMessage+len("…"))
			var got *pgconn.PgError
			require.ErrorAs(t, err, &got)
			require.Same(t, pgErr, got)

			wrapped := storable.Translate(fmt.Errorf("append entry: %w", pgErr))
			require.ErrorIs(t, wrapped, storable.ErrUnstorable)
		})
	}

	for _, c := range []struct {
		name  string
		setup string
		sql   string
		args  []any
		code  string
	}{
		{name: "UniqueViolation", setup: keys, sql: `INSERT INTO storable_key VALUES ('a'), ('a')`, code: "23505"},
		{name: "InvalidUUID", sql: `SELECT $1::text::uuid`, args: []any{"nope"}, code: "22P02"},
		{name: "DivisionByZero", sql: `SELECT 1/0`, code: "22012"},
		{name: "SyntaxError", sql: `SELEC 1`, code: "42601"},
		{name: "UndefinedTable", sql: `SELECT FROM storable_nowhere`, code: "42P01"},
	} {
		t.Run("Keeps"+c.name, func(t *testing.T) {
			t.Parallel()
			pgErr := refusal(t, c.setup, c.sql, c.args...)
			require.Equal(t, c.code, pgErr.Code, "%v", pgErr)
			require.True(t, storable.Translate(pgErr) == error(pgErr), "translated %v", pgErr)
		})
	}

	t.Run("KeepsOtherErrors", func(t *testing.T) {
		t.Parallel()
		require.NoError(t, storable.Translate(nil))
		for _, err := range []error{context.Canceled, pgx.ErrNoRows, errors.New("connection reset")} {
			require.True(t, storable.Translate(err) == err, "translated %v", err)
		}
	})
}

// randomText returns n random characters, which Postgres cannot compress much.
func randomText(n int) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	b := make([]byte, n)
	for i := range b {
		b[i] = alphabet[rand.IntN(len(alphabet))]
	}
	return string(b)
}

// BenchmarkCheckJSON measures storable.CheckJSON on a realistic step output of about 1 MB.
func BenchmarkCheckJSON(b *testing.B) {
	type item struct {
		SKU      string            `json:"sku"`
		Name     string            `json:"name"`
		Quantity int               `json:"quantity"`
		Price    float64           `json:"price"`
		Tags     []string          `json:"tags"`
		Attrs    map[string]string `json:"attrs"`
	}
	type order struct {
		ID       string         `json:"id"`
		Status   string         `json:"status"`
		Customer map[string]any `json:"customer"`
		Items    []item         `json:"items"`
		Total    float64        `json:"total"`
		Ratio    float64        `json:"ratio"`
		Note     string         `json:"note"`
		Paid     bool           `json:"paid"`
		Refund   *float64       `json:"refund"`
	}
	r := rand.New(rand.NewPCG(1, 2))
	var orders []order
	var doc []byte
	for i := 0; len(doc) < 1<<20; i++ {
		o := order{
			ID:     fmt.Sprintf("ord_%08d", i),
			Status: []string{"pending", "paid", "shipped"}[i%3],
			Customer: map[string]any{
				"name": "Zoë Müller-日本", "email": fmt.Sprintf("c%d@example.com", i),
				"address": map[string]any{"city": "Zürich", "zip": "8001", "lines": []string{"Bahnhofstrasse 1", "c/o \"Acme\""}},
			},
			Total: r.Float64() * 1000,
			Ratio: r.Float64() * 1e-9,
			Note:  "Deliver before 9:00 — ring twice\nthen leave at the door 😀 <b>&</b>\t\\",
			Paid:  i%2 == 0,
		}
		for j := range 3 {
			o.Items = append(o.Items, item{
				SKU: fmt.Sprintf("sku-%d-%d", i, j), Name: "Widget «deluxe»", Quantity: r.IntN(100),
				Price: r.Float64() * 100, Tags: []string{"new", "sale"}, Attrs: map[string]string{"color": "blue", "size": "M"},
			})
		}
		orders = append(orders, o)
		if i%100 == 99 {
			var err error
			if doc, err = json.Marshal(map[string]any{"orders": orders, "page": i / 100}); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := storable.CheckJSON(doc); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(doc)))
	b.ReportAllocs()
	for b.Loop() {
		if err := storable.CheckJSON(doc); err != nil {
			b.Fatal(err)
		}
	}
}

// Package names says what a name in stepgate may be, for the gateway and the SDK alike:
// one definition, so a name the SDK takes is never refused by the gateway, or the other
// way round.
package names

import (
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"
)

// MaxBytes bounds every name: functions, steps and other journal entries, events,
// schedules, roles.
const MaxBytes = 255

// FunctionPattern is what a function's (or a schedule's) name may be: 1 to MaxBytes
// letters, digits, '.', '_' and '-', starting with a letter or digit. It is the pattern
// of openapi.yaml's FunctionName.
const FunctionPattern = `^[A-Za-z0-9][A-Za-z0-9._-]{0,254}$`

var function = regexp.MustCompile(FunctionPattern)

// ValidFunction reports whether s may name a function.
func ValidFunction(s string) bool { return function.MatchString(s) }

// CheckFunction returns an error naming what (such as "function name") when s may not
// name a function.
func CheckFunction(what, s string) error {
	if !ValidFunction(s) {
		return fmt.Errorf("%s %q is invalid: use 1 to %d letters, digits, '.', '_' or '-', starting with a letter or digit", what, clip(s), MaxBytes)
	}
	return nil
}

// Check returns an error naming what (such as "step name") when s is not 1 to MaxBytes
// bytes of UTF-8 text without NUL bytes: a name of a step, an entry or an event.
func Check(what, s string) error {
	switch {
	case s == "" || len(s) > MaxBytes:
		return fmt.Errorf("%s %q must be 1 to %d bytes", what, clip(s), MaxBytes)
	case !utf8.ValidString(s) || strings.ContainsRune(s, 0):
		return fmt.Errorf("%s %q must be UTF-8 text without NUL bytes", what, clip(s))
	}
	return nil
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

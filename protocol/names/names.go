// Package names says what a name in stepgate may be, for the gateway and the SDK alike:
// one definition, so a name the SDK takes is never refused by the gateway, or the other
// way round.
package names

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/google/uuid"
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

// RunSentID reports whether id has the form of the ids of the events and messages runs
// send, "<run id>:<seq>": a UUID in its 36-character text form (any case), a colon and
// decimal digits. Such ids are the runs': the API refuses them, and a run may send only
// its own (OwnRunSentID), so no one can claim the id of a run's event or message before
// the run sends it.
func RunSentID(id string) bool {
	runID, seq, ok := strings.Cut(id, ":")
	if !ok || len(runID) != 36 || seq == "" || strings.Trim(seq, "0123456789") != "" {
		return false
	}
	_, err := uuid.Parse(runID)
	return err == nil
}

// OwnRunSentID checks the id of an event or a message that run runID sends in its entry
// at seq, defaulting it to "<run id>:<seq>": an id of that form (RunSentID) must be
// exactly that one, an error naming what and the rule otherwise, so that a run cannot
// claim another run's (nor its own later entry's) id.
func OwnRunSentID(what string, id *string, runID string, seq int) error {
	own := runID + ":" + strconv.Itoa(seq)
	if *id == "" {
		*id = own
	}
	if err := Check(what, *id); err != nil {
		return err
	}
	if RunSentID(*id) && *id != own {
		return fmt.Errorf("%s %q has the form <run id>:<seq>, which is reserved: a run's event or message may have that form only as its own, %q", what, *id, own)
	}
	return nil
}

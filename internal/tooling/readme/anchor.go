package readme

import (
	"fmt"
	"regexp"
	"strings"
	"unicode"
)

// slugger gives headings their anchors as GitHub does (github-slugger): each anchor is
// [Anchor] the heading's text, and a repeated one gets "-1", "-2", … in order.
type slugger map[string]int

func (s slugger) slug(heading string) string {
	slug := Anchor(heading)
	base := slug
	for {
		if _, taken := s[slug]; !taken {
			break
		}
		s[base]++
		slug = fmt.Sprintf("%s-%d", base, s[base])
	}
	s[slug] = 0
	return slug
}

var (
	mdImageOrLink = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
	htmlTag       = regexp.MustCompile(`<[^>]+>`)
	mdEmphasis    = regexp.MustCompile(`(^|[^\pL\pN])_+([^_]+?)_+([^\pL\pN]|$)`)
)

// Anchor is the anchor GitHub gives a heading's markdown text: the text as rendered
// (code spans' text kept, links' text kept, tags and emphasis dropped), lowercased, with
// every character that is not a letter, a mark, a number, an underscore, a hyphen or a
// space dropped, and each space made a hyphen.
func Anchor(heading string) string {
	// Code spans (the odd pieces between backticks) render their text as it is, "<a>"
	// included; markup is read only outside them.
	pieces := strings.Split(heading, "`")
	for i := range pieces {
		if i%2 == 1 && i+1 < len(pieces) {
			continue // a code span (an unclosed backtick's rest is text)
		}
		pieces[i] = mdImageOrLink.ReplaceAllString(pieces[i], "$1")
		pieces[i] = htmlTag.ReplaceAllString(pieces[i], "")
		pieces[i] = mdEmphasis.ReplaceAllString(pieces[i], "$1$2$3")
	}
	text := strings.Join(pieces, "")
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(text)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r) || unicode.IsMark(r) || unicode.Is(unicode.Pc, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

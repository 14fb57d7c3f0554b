package ident

import (
	"strings"
	"testing"
)

func TestValidateRejectsControlCharacters(t *testing.T) {
	t.Parallel()
	for _, name := range []string{
		"ev\nDROP TABLE canary; --",
		"ev\rx",
		"tab\there",
		"del\x7f",
		"c1\u0085next-line",
		"nul\x00byte",
	} {
		err := Validate("table", name)
		if err == nil {
			t.Errorf("Validate(%q) accepted a control character", name)
			continue
		}
		if !strings.HasPrefix(err.Error(), "table: ") {
			t.Errorf("Validate(%q) = %q, want the error to name the field first", name, err)
		}
		if strings.ContainsAny(err.Error(), "\n\r") {
			t.Errorf("Validate(%q) = %q: the error itself carries the raw control character", name, err)
		}
		if _, err := New("", name); err == nil {
			t.Errorf("New(\"\", %q) accepted it as a table", name)
		}
		if _, err := New(name, "t"); err == nil {
			t.Errorf("New(%q, \"t\") accepted it as a schema", name)
		}
	}
	for _, name := range []string{`odd "quoted" name`, "été ☃ 表", "with space", "semi;colon--dash"} {
		if err := Validate("table", name); err != nil {
			t.Errorf("Validate(%q) = %v, want it accepted (legal once quoted)", name, err)
		}
	}
}

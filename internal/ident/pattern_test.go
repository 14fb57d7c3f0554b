package ident

import (
	"slices"
	"strings"
	"testing"
)

func TestSchemaPatterns(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
	}{
		{"tenant_*", []string{`tenant\_%`}},
		{"shop_?, billing", []string{`shop\__`, "billing"}},
		{`a%b\c`, []string{`a\%b\\c`}},
		{"Tenant*,Tenant*", []string{"Tenant%"}},
	} {
		got, err := SchemaPatterns("--schemas", c.in)
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("SchemaPatterns(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
	for _, c := range []struct{ in, want string }{
		{"", "empty pattern"},
		{"a,,b", "empty pattern"},
		{"tenant\n*", "control character"},
		{strings.Repeat("x", MaxLen+1), "at most"},
	} {
		_, err := SchemaPatterns("--schemas", c.in)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "--schemas: ") {
			t.Errorf("SchemaPatterns(%q) = %v; want an error on --schemas naming %q", c.in, err, c.want)
		}
	}
}

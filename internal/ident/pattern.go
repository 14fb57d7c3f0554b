package ident

import (
	"strings"
)

// SchemaPatterns parses a comma-separated list of schema name patterns
// (`tenant_*`, `shop_?`, `billing`): `*` stands for any run of
// characters, `?` for one, anything else for itself, case included. It
// returns them as LIKE patterns with `\` as the escape character, so a
// tenant's `_` or `%` matches only itself. Each pattern is validated as a
// name (no control characters, at most MaxLen bytes); field names the
// setting in errors.
func SchemaPatterns(field, list string) ([]string, error) {
	var likes []string
	seen := map[string]bool{}
	for _, p := range strings.Split(list, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			return nil, fieldErr(field, "%q has an empty pattern (give names or patterns separated by commas, such as tenant_*)", list)
		}
		if err := Validate(field, p); err != nil {
			return nil, err
		}
		var b strings.Builder
		for _, r := range p {
			switch r {
			case '*':
				b.WriteByte('%')
			case '?':
				b.WriteByte('_')
			case '%', '_', '\\':
				b.WriteByte('\\')
				b.WriteRune(r)
			default:
				b.WriteRune(r)
			}
		}
		if like := b.String(); !seen[like] {
			seen[like] = true
			likes = append(likes, like)
		}
	}
	return likes, nil
}

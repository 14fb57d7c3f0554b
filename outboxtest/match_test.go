package outboxtest

import "testing"

// jsonContains follows jsonb's @>, checked here against what PostgreSQL
// answers for the same pairs (SELECT doc::jsonb @> sub::jsonb).
func TestJSONContains(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		doc, sub string
		want     bool
	}{
		{`{"a": 1, "b": 2}`, `{"a": 1}`, true},
		{`{"a": 1}`, `{"a": 1.0}`, true},
		{`{"a": 1}`, `{"a": "1"}`, false},
		{`{"a": {"b": 1, "c": 2}}`, `{"a": {"c": 2}}`, true},
		{`{"a": [1, 2, 3]}`, `{"a": [3, 1]}`, true},
		{`{"a": [1, 2]}`, `{"a": [4]}`, false},
		{`[{"sku": "a"}, {"sku": "b"}]`, `[{"sku": "b"}]`, true},
		{`["x", "y"]`, `"x"`, true},
		{`{"a": null}`, `{"a": null}`, true},
		{`{"a": 1}`, `{}`, true},
		{`{"a": 1}`, `{"b": null}`, false},
		{`"x"`, `"x"`, true},
		{`{"a": true}`, `{"a": false}`, false},
	} {
		got, err := jsonContains([]byte(tc.doc), []byte(tc.sub))
		if err != nil || got != tc.want {
			t.Errorf("%s @> %s = %v, %v; want %v", tc.doc, tc.sub, got, err, tc.want)
		}
	}
}

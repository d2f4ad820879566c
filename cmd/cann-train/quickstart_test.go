package main

import (
	"strings"
	"testing"
)

func TestParseInjections(t *testing.T) {
	tests := []struct {
		specs   []string
		want    map[string]int64
		wantErr string
	}{
		{nil, map[string]int64{}, ""},
		{[]string{"kill:node-2@130", "kill:node-4@10"}, map[string]int64{"node-2": 130, "node-4": 10}, ""},
		{[]string{"kill:node-5@10"}, nil, "no such node"},
		{[]string{"kill:node-2@0"}, nil, "step must be"},
		{[]string{"kill:node-2@600"}, nil, "step must be"},
		{[]string{"stop:node-2@10"}, nil, "want kill:"},
		{[]string{"kill:node-2"}, nil, "want kill:"},
		{[]string{"kill:node-2@5", "kill:node-2@6"}, nil, "already killed"},
	}
	for _, tc := range tests {
		got, err := parseInjections(tc.specs, 4, 600)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%v: error %v, want %q", tc.specs, err, tc.wantErr)
			}
			continue
		}
		if err != nil || len(got) != len(tc.want) {
			t.Errorf("%v: got %v, %v", tc.specs, got, err)
			continue
		}
		for k, v := range tc.want {
			if got[k] != v {
				t.Errorf("%v: %s = %d, want %d", tc.specs, k, got[k], v)
			}
		}
	}
}

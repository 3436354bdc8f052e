package main

import (
	"strings"
	"testing"
)

func TestSessionCapsFlags(t *testing.T) {
	c := sessionCaps{memory: "512MiB", disk: "2GiB"}
	j, err := c.jail()
	if err != nil || j.SessionMemory != 512<<20 || j.Disk != 2<<30 {
		t.Fatalf("%+v %v", j, err)
	}
	for _, bad := range []sessionCaps{{memory: "lots"}, {disk: "-1GiB"}, {memory: "0"}} {
		if _, err := bad.jail(); err == nil || !strings.Contains(err.Error(), "--session-") {
			t.Fatalf("%+v: %v", bad, err)
		}
	}
	// Unset flags take the library's defaults.
	if j, err := (&sessionCaps{}).jail(); err != nil || j.SessionMemory != 0 || j.Disk != 0 {
		t.Fatalf("%+v %v", j, err)
	}
}

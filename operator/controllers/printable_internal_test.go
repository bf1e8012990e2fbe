package controllers

import "testing"

// An installer's output (tenant code) goes into Events that kubectl prints: nothing in it may act
// on a terminal.
func TestPrintable(t *testing.T) {
	in := "ERROR: \x1b[31mfailed\x1b[0m\r\nline two\tok\x07\x00 \xff end ✓"
	want := "ERROR: [31mfailed[0m\nline two\tok  end ✓"
	if got := printable(in); got != want {
		t.Errorf("printable(%q) = %q, want %q", in, got, want)
	}
}

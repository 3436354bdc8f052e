package jail

import (
	"math"
	"testing"
)

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{
		"1GiB": 1 << 30, "512MiB": 512 << 20, "1.5GiB": 3 << 29, "2G": 2 << 30, "500MB": 500e6,
		"4096": 4096, " 64 KiB ": 64 << 10, "1TiB": 1 << 40, "10B": 10, "3kB": 3000,
	} {
		got, err := ParseSize(in)
		if err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0", "-1GiB", "GiB", "1 GiBs", "1e9", "0x10", "+5", "9999999999TiB", "0.1B", "NaN", "Inf", "1_000"} {
		if n, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) = %d, want an error", in, n)
		}
	}
}

func TestFormatSize(t *testing.T) {
	for n, want := range map[int64]string{1 << 30: "1 GiB", 3 << 29: "1.5 GiB", 512 << 20: "512 MiB", 100: "100 B", 1 << 40: "1 TiB"} {
		if got := formatSize(n); got != want {
			t.Errorf("formatSize(%d) = %q, want %q", n, got, want)
		}
	}
}

func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"1GiB", "512MiB", "1.5G", "0", "-3", "1e3", "9223372036854775807", "8EiB"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseSize(s)
		if err != nil {
			return
		}
		if n <= 0 {
			t.Fatalf("ParseSize(%q) = %d", s, n)
		}
		if n > 1<<60 {
			return // formatSize rounds; near the top that can overflow
		}
		// What formatSize writes reads back to about the same size.
		back, err := ParseSize(formatSize(n))
		if err != nil {
			t.Fatalf("ParseSize(formatSize(%d) = %q): %v", n, formatSize(n), err)
		}
		if d := math.Abs(float64(back-n)) / float64(n); d > 0.01 {
			t.Fatalf("%d → %q → %d", n, formatSize(n), back)
		}
	})
}

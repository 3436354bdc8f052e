package jail

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

var units = []struct {
	suffix string
	mult   int64
}{
	// Longest first, so that "GiB" is not read as "B".
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"kB", 1e3}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
	{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"T", 1 << 40},
	{"B", 1},
}

// ParseSize reads a size in bytes as a person writes it: "1GiB", "512MiB",
// "1.5GiB", "2G" (binary, like ulimit), "500MB" (decimal) or a plain
// number of bytes. It refuses zero, negatives and what does not fit in an
// int64.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range units {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.mult
			break
		}
	}
	bad := fmt.Errorf("jail: size %q: write a positive number of bytes with an optional unit, such as 1GiB or 512MiB", s)
	if t == "" || strings.ContainsAny(t, "+-eExXpP_") {
		return 0, bad
	}
	if n, err := strconv.ParseInt(t, 10, 64); err == nil {
		if n <= 0 || n > math.MaxInt64/mult {
			return 0, bad
		}
		return n * mult, nil
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil || !(f > 0) {
		return 0, bad
	}
	v := f * float64(mult)
	if v >= math.MaxInt64 || v < 1 {
		return 0, bad
	}
	return int64(v), nil
}

// formatSize writes n bytes in the largest binary unit that keeps it
// short: 1073741824 is "1 GiB", 1610612736 is "1.5 GiB".
func formatSize(n int64) string {
	for _, u := range []struct {
		name string
		mult int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.mult {
			v := float64(n) / float64(u.mult)
			return strconv.FormatFloat(math.Round(v*100)/100, 'f', -1, 64) + " " + u.name
		}
	}
	return strconv.FormatInt(n, 10) + " B"
}

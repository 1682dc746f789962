// Command quantitycheck parses quantities the way the API server does, for the differential
// test of coscheduling.api.quantity: one JSON string literal per line on stdin (so any
// character, whitespace included, can be sent), one answer per line on stdout:
//
//	ok <unscaled> <scale> <milli> <units>   the value is unscaled * 10^-scale; milli and units
//	                                        are MilliValue() and Value(), or "-" when the
//	                                        rounded-up amount does not fit an int64
//	refused <reason>                        ParseQuantity refused the string
//	badline <reason>                        the line was not a JSON string
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"

	inf "gopkg.in/inf.v0"
	"k8s.io/apimachinery/pkg/api/resource"
)

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<26)
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	for in.Scan() {
		fmt.Fprintln(out, answer(in.Bytes()))
	}
	if err := in.Err(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// answer parses one line. The decoded text goes through Quantity.UnmarshalJSON wrapped in
// quotes: that is the API server's own path for a JSON string (trim spaces, then
// ParseQuantity), without JSON escapes in the way.
func answer(line []byte) string {
	var text string
	if err := json.Unmarshal(line, &text); err != nil {
		return "badline " + err.Error()
	}
	var q resource.Quantity
	if err := q.UnmarshalJSON([]byte(`"` + text + `"`)); err != nil {
		return "refused " + err.Error()
	}
	milli, units := q.MilliValue(), q.Value()
	exact := q.AsDec()
	return fmt.Sprintf("ok %s %d %s %s", exact.UnscaledBig(), exact.Scale(),
		fitting(exact, 1000, milli), fitting(exact, 1, units))
}

// fitting is Go's scaled value when the amount, times factor and rounded up, fits an int64:
// beyond that MilliValue and Value wrap, and the answer is "-".
func fitting(exact *inf.Dec, factor int64, scaled int64) string {
	product := new(inf.Dec).Mul(exact, inf.NewDec(factor, 0))
	product.Round(product, 0, inf.RoundCeil)
	if !product.UnscaledBig().IsInt64() {
		return "-"
	}
	return fmt.Sprint(scaled)
}

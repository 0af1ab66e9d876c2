package bench

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The chart is written by hand as SVG: a plotting library (gonum/plot, with its PDF, font
// and raster dependencies) cost most of the test suite's cold compile time for a few
// lines and labels.

// One panel's size in SVG pixels (about the 11 x 9 cm the panels had) and the margins
// around its plot area, which hold the title, the tick labels and the axis labels.
const (
	chartW, chartH                               = 420, 340
	chartLeft, chartRight, chartTop, chartBottom = 64, 14, 28, 44
)

// chartColors is the palette of gonum/plot's plotutil, which the chart used before.
var chartColors = []string{"#f15a60", "#7ac36a", "#5a9bd4", "#faa75b", "#9e67ab", "#ce7058", "#d77fb4"}

// xmlText escapes text for SVG; encoding/xml would be a heavy import for five characters.
var xmlText = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;", "'", "&apos;")

// ErrChartFormat is CheckChartPath's error: a chart path that does not end in .svg.
var ErrChartFormat = errors.New("only .svg charts are written")

// CheckChartPath reports whether Chart can write path (its extension is .svg, in any
// case), so that a caller can refuse a wrong name before it measures anything.
func CheckChartPath(path string) error {
	if !strings.EqualFold(filepath.Ext(path), ".svg") {
		return ErrChartFormat
	}
	return nil
}

// Chart draws device time per step against vocabulary size, one line per route and one
// panel per dtype (rows) and batch size (columns), with a legend of the routes at the
// right, and writes it to path as SVG: a path that does not end in .svg is an error.
// gumbel's routes are solid lines, every other route (the peers) dashed; the time axis is
// logarithmic because the routes span orders of magnitude. Points without a positive time
// are left out.
func Chart(ms []Measurement, path string) error {
	if err := CheckChartPath(path); err != nil {
		return fmt.Errorf("chart %s: %w", path, err)
	}
	var dtypes []string
	var batches []int
	var routes []Route
	for _, m := range ms {
		if m.DeviceUs <= 0 {
			continue
		}
		if !slices.Contains(dtypes, m.DTypeName) {
			dtypes = append(dtypes, m.DTypeName)
		}
		if !slices.Contains(batches, m.Batch) {
			batches = append(batches, m.Batch)
		}
		if !slices.Contains(routes, m.Route) {
			routes = append(routes, m.Route)
		}
	}
	if len(routes) == 0 {
		return fmt.Errorf("chart %s: no measurement with a positive device time", path)
	}
	slices.Sort(batches)

	longest := 0
	for _, r := range routes {
		longest = max(longest, utf8.RuneCountInString(string(r)))
	}
	legendX, legendW := len(batches)*chartW, 50+7*longest // 7 pixels a character: generous at font size 10
	width, height := legendX+legendW, max(len(dtypes)*chartH, 40+16*len(routes))
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %[1]d %[2]d" font-family="sans-serif" font-size="10">`+"\n", width, height)
	b.WriteString(`<rect width="100%" height="100%" fill="white"/>` + "\n")
	for i, dt := range dtypes {
		for j, batch := range batches {
			chartPanel(&b, ms, routes, dt, batch, j*chartW, i*chartH)
		}
	}
	for i, r := range routes {
		y := float64(chartTop + 16*i)
		chartLine(&b, routes, r, [][2]float64{{float64(legendX + 8), y}, {float64(legendX + 36), y}}, false)
		chartMarkers(&b, routes, r, [][2]float64{{float64(legendX + 22), y}})
		fmt.Fprintf(&b, `<text x="%d" y="%.1f">%s</text>`+"\n", legendX+42, y+3.5, xmlText.Replace(string(r)))
	}
	b.WriteString("</svg>\n")
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// chartPanel draws the panel of one dtype and batch size with its top left corner at
// (x0, y0).
func chartPanel(b *strings.Builder, ms []Measurement, routes []Route, dtype string, batch, x0, y0 int) {
	left, right := float64(x0+chartLeft), float64(x0+chartW-chartRight)
	top, bottom := float64(y0+chartTop), float64(y0+chartH-chartBottom)
	mid := (left + right) / 2
	fmt.Fprintf(b, `<text x="%.1f" y="%d" text-anchor="middle" font-size="13">%s</text>`+"\n", mid, y0+18, xmlText.Replace(fmt.Sprintf("%s, batch %d", dtype, batch)))

	lines := make([][][2]float64, len(routes)) // (vocab, µs) of each route, then pixels
	xlo, xhi, ylo, yhi := math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
	for _, m := range ms {
		if m.DTypeName == dtype && m.Batch == batch && m.DeviceUs > 0 {
			i := slices.Index(routes, m.Route)
			lines[i] = append(lines[i], [2]float64{float64(m.Vocab), m.DeviceUs})
			xlo, xhi = min(xlo, float64(m.Vocab)), max(xhi, float64(m.Vocab))
			ylo, yhi = min(ylo, m.DeviceUs), max(yhi, m.DeviceUs)
		}
	}
	if math.IsInf(xlo, 1) { // a peer may cover only some of the dtypes and batches
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle">no measurement</text>`+"\n", mid, (top+bottom)/2)
		return
	}
	// The time axis spans whole decades, so that it always has labelled ticks; the vocab
	// axis is linear, as it was, with a little room so that the end markers stay inside.
	elo, ehi := int(math.Floor(math.Log10(ylo))), int(math.Ceil(math.Log10(yhi)))
	if elo == ehi {
		ehi++
	}
	ylo, yhi = math.Pow10(elo), math.Pow10(ehi)
	if xlo == xhi {
		xlo, xhi = xlo-max(xlo/10, 1), xhi+max(xhi/10, 1)
	}
	pad := (xhi - xlo) / 25
	xlo, xhi = xlo-pad, xhi+pad
	px := func(x float64) float64 { return left + (x-xlo)/(xhi-xlo)*(right-left) }
	py := func(y float64) float64 { return bottom - math.Log10(y/ylo)/math.Log10(yhi/ylo)*(bottom-top) }

	// The time ticks (labelled decades with grid lines, unlabelled 2..9 between them), the
	// vocab ticks at round steps, then the axes over the grid.
	var minor strings.Builder
	for e := elo; e <= ehi; e++ {
		y := py(math.Pow10(e))
		fmt.Fprintf(b, `<path d="M%.1f %.1fH%.1f" stroke="#ddd"/><path d="M%.1f %.1fh-5" stroke="black"/>`+"\n", left, y, right, left, y)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="end">%s</text>`+"\n", left-7, y+3.5, strconv.FormatFloat(math.Pow10(e), 'f', max(0, -e), 64))
		for k := 2.0; k < 10 && e < ehi; k++ {
			fmt.Fprintf(&minor, "M%.1f %.1fh-3", left, py(k*math.Pow10(e)))
		}
	}
	fmt.Fprintf(b, `<path d="%s" stroke="black"/>`+"\n", minor.String())
	step, decimals := niceStep(xhi - xlo)
	for k := math.Ceil(xlo / step); k*step <= xhi; k++ {
		x := k * step
		fmt.Fprintf(b, `<path d="M%.1f %.1fv5" stroke="black"/>`+"\n", px(x), bottom)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", px(x), bottom+16, strconv.FormatFloat(x, 'f', decimals, 64))
	}
	fmt.Fprintf(b, `<path d="M%.1f %.1fV%.1fH%.1f" fill="none" stroke="black"/>`+"\n", left, top, bottom, right)
	fmt.Fprintf(b, `<text x="%.1f" y="%d" text-anchor="middle" font-size="11">vocabulary size</text>`+"\n", mid, y0+chartH-8)
	fmt.Fprintf(b, `<text transform="translate(%d %.1f) rotate(-90)" text-anchor="middle" font-size="11">device time per step (µs)</text>`+"\n", x0+14, (top+bottom)/2)

	for i, pts := range lines {
		if len(pts) == 0 {
			continue
		}
		slices.SortFunc(pts, func(a, b [2]float64) int { return cmp.Compare(a[0], b[0]) })
		for k := range pts {
			pts[k] = [2]float64{px(pts[k][0]), py(pts[k][1])}
		}
		chartLine(b, routes, routes[i], pts, true)
		chartMarkers(b, routes, routes[i], pts)
	}
}

// niceStep returns a step of 1, 2 or 5 times a power of ten that cuts span into at most
// five parts, and the decimals its multiples need.
func niceStep(span float64) (float64, int) {
	e := math.Floor(math.Log10(span / 5))
	unit := math.Pow(10, e)
	for _, k := range []float64{1, 2, 5} {
		if k*unit >= span/5 {
			return k * unit, max(0, int(-e))
		}
	}
	return 10 * unit, max(0, int(-e)-1)
}

// chartStyle returns r's colour, its dashes ("" for a solid line) and its marker shape.
// Own routes and peers each walk the palette from its start and are told apart by the
// dashes; the style depends only on r's place in routes, so a route looks the same in
// every panel and in the legend.
func chartStyle(routes []Route, r Route) (color, dashes string, shape int) {
	i := slices.Index(routes, r)
	n := 0
	for _, o := range routes[:i] {
		if IsOwn(o) == IsOwn(r) {
			n++
		}
	}
	if !IsOwn(r) {
		dashes = ` stroke-dasharray="6 3"`
	}
	return chartColors[n%len(chartColors)], dashes, i
}

// chartLine draws a route's line through pts (in pixels); in a panel it carries the
// route's name as a tooltip.
func chartLine(b *strings.Builder, routes []Route, r Route, pts [][2]float64, titled bool) {
	color, dashes, _ := chartStyle(routes, r)
	fmt.Fprintf(b, `<polyline fill="none" stroke="%s" stroke-width="1.5"%s points="`, color, dashes)
	for k, p := range pts {
		if k > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(b, "%.1f,%.1f", p[0], p[1])
	}
	if titled {
		fmt.Fprintf(b, `"><title>%s</title></polyline>`+"\n", xmlText.Replace(string(r)))
		return
	}
	b.WriteString(`"/>` + "\n")
}

// chartMarkers draws r's marker at each of pts, as one path: a circle, square, triangle,
// diamond or upturned triangle, filled or (for the next five routes) hollow, so that an
// own route and a peer of the same colour still differ where their lines cross.
func chartMarkers(b *strings.Builder, routes []Route, r Route, pts [][2]float64) {
	color, _, shape := chartStyle(routes, r)
	const s = 3.5 // the markers' half width
	var d strings.Builder
	for _, p := range pts {
		x, y := p[0], p[1]
		switch shape % 5 {
		case 0:
			fmt.Fprintf(&d, "M%.1f %.1fa%g %g 0 1 0 %g 0a%g %g 0 1 0 %g 0", x-s, y, s, s, 2*s, s, s, -2*s)
		case 1:
			fmt.Fprintf(&d, "M%.1f %.1fh%gv%gh%gz", x-s, y-s, 2*s, 2*s, -2*s)
		case 2:
			fmt.Fprintf(&d, "M%.1f %.1fl%g %gh%gz", x, y-s, s, 2*s, -2*s)
		case 3:
			fmt.Fprintf(&d, "M%.1f %.1fl%g %gl%g %gl%g %gz", x, y-s, s, s, -s, s, -s, -s)
		default:
			fmt.Fprintf(&d, "M%.1f %.1fl%g %gh%gz", x, y+s, s, -2*s, -2*s)
		}
	}
	fill := color
	if shape/5%2 == 1 {
		fill = "white"
	}
	fmt.Fprintf(b, `<path d="%s" fill="%s" stroke="%s"/>`+"\n", d.String(), fill, color)
}

package bench

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Chart draws device time per step against vocabulary size, one line per route and one
// panel per dtype (rows) and batch size (columns), and writes it to path in the format
// its extension names (.svg, .png, .pdf, .eps, .jpg, .tif). gumbel's routes are solid
// lines, every other route (the peers) dashed; the time axis is logarithmic because the
// routes span orders of magnitude. Points without a positive time are left out.
func Chart(ms []Measurement, path string) error {
	format := strings.TrimPrefix(strings.ToLower(filepath.Ext(path)), ".")
	if format == "" {
		return fmt.Errorf("chart %s: no file extension to choose the image format by", path)
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

	plots := make([][]*plot.Plot, len(dtypes))
	for i, dt := range dtypes {
		plots[i] = make([]*plot.Plot, len(batches))
		for j, b := range batches {
			p, err := chartPanel(ms, routes, dt, b)
			if err != nil {
				return fmt.Errorf("chart %s: %w", path, err)
			}
			plots[i][j] = p
		}
	}

	width, height := vg.Length(len(batches))*11*vg.Centimeter, vg.Length(len(dtypes))*9*vg.Centimeter
	canvas, err := draw.NewFormattedCanvas(width, height, format)
	if err != nil {
		return fmt.Errorf("chart %s: %w", path, err)
	}
	tiles := draw.Tiles{
		Rows: len(dtypes), Cols: len(batches),
		PadX: vg.Centimeter, PadY: vg.Centimeter,
		PadTop: vg.Millimeter * 3, PadBottom: vg.Millimeter * 3, PadLeft: vg.Millimeter * 3, PadRight: vg.Millimeter * 3,
	}
	dc := draw.New(canvas)
	panels := plot.Align(plots, tiles, dc)
	for i := range plots {
		for j := range plots[i] {
			plots[i][j].Draw(panels[i][j])
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := canvas.WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("chart %s: %w", path, err)
	}
	return f.Close()
}

// chartPanel plots one dtype and batch size.
func chartPanel(ms []Measurement, routes []Route, dtype string, batch int) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s, batch %d", dtype, batch)
	p.X.Label.Text = "vocabulary size"
	p.Y.Label.Text = "device µs per step"
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Legend.Top = true
	p.Legend.Left = true
	p.Legend.TextStyle.Font.Size = vg.Points(7)
	ours, theirs := 0, 0
	lo, hi := math.Inf(1), 0.0
	for _, r := range routes {
		var pts plotter.XYs
		for _, m := range ms {
			if m.Route == r && m.DTypeName == dtype && m.Batch == batch && m.DeviceUs > 0 {
				pts = append(pts, plotter.XY{X: float64(m.Vocab), Y: m.DeviceUs})
			}
		}
		if len(pts) == 0 {
			continue
		}
		slices.SortFunc(pts, func(a, b plotter.XY) int { return int(a.X - b.X) })
		line, points, err := plotter.NewLinePoints(pts)
		if err != nil {
			return nil, fmt.Errorf("%s %s batch %d: %w", r, dtype, batch, err)
		}
		// Styles are fixed per route, so that a route looks the same in every panel.
		i := slices.Index(routes, r)
		if IsOwn(r) {
			line.Color = plotutil.Color(ours)
			ours++
		} else {
			line.Color = plotutil.Color(theirs)
			line.Dashes = []vg.Length{vg.Points(4), vg.Points(2)}
			theirs++
		}
		points.Color = line.Color
		points.Shape = plotutil.Shape(i)
		p.Add(line, points)
		p.Legend.Add(string(r), line, points)
		for _, q := range pts {
			lo, hi = min(lo, q.Y), max(hi, q.Y)
		}
	}
	// The legend sits in the top of the panel; raise the top of the (logarithmic) time
	// axis so that the lines stay below it. legendShare is the legend's part of the
	// panel's height: ~8.5 points a route out of the ~190 points a 9 cm panel plots in.
	if entries := ours + theirs; entries > 0 {
		legendShare := min(0.6, (8.5*float64(entries)+6)/190)
		decades := max(math.Log10(hi/lo), 0.5)
		p.Y.Min = lo / 1.2
		p.Y.Max = lo * math.Pow(10, decades/(1-legendShare)) * 1.2
	}
	return p, nil
}

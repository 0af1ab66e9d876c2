// Command gen writes package abi into the files that other languages read: the C++
// header of the CUDA/HIP and Metal editions (kernelsrc/abi.h) and the generated tables of
// kernelsrc/ABI.md. `go generate ./kernelsrc/abi` runs it; TestGeneratedFilesUpToDate
// fails while its output differs from the files.
//
// It reads the package's source, not its compiled values, so that each constant's doc
// comment travels with it: a constant's value comes from the type checker, its comment
// (after the name) becomes the meaning column of ABI.md and a comment in the header.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"go/ast"
	"go/constant"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"log"
	"math"
	"math/bits"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"unicode"
)

func main() {
	root := flag.String("root", "..", "the kernelsrc folder (package abi's parent)")
	flag.Parse()
	files, err := render(*root)
	if err != nil {
		log.Fatal(err)
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(*root, name), b, 0o644); err != nil {
			log.Fatal(err)
		}
	}
}

// render returns the generated files, by path relative to root.
func render(root string) (map[string][]byte, error) {
	pkg, err := load(filepath.Join(root, "abi"))
	if err != nil {
		return nil, err
	}
	md, err := os.ReadFile(filepath.Join(root, "ABI.md"))
	if err != nil {
		return nil, err
	}
	tables, err := fillTables(string(md), pkg)
	if err != nil {
		return nil, err
	}
	return map[string][]byte{
		"abi.h":  header(pkg),
		"ABI.md": []byte(tables),
	}, nil
}

// constDecl is one exported constant of package abi.
type constDecl struct {
	name  string
	typ   string // the named type, or "" for an untyped or basic constant
	basic types.BasicKind
	value constant.Value
	doc   string // the comment without the leading name
	group string // the comment of its const block
}

// field is one field of RowParams.
type field struct {
	name   string
	offset int64
	basic  types.BasicKind
	count  int // array length, 1 for scalars
	doc    string
}

type abiPackage struct {
	consts []constDecl
	fields []field
}

// load parses and type-checks package abi.
func load(dir string) (*abiPackage, error) {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, dir, func(fi os.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go")
	}, parser.ParseComments)
	if err != nil {
		return nil, err
	}
	ap := pkgs["abi"]
	if ap == nil {
		return nil, fmt.Errorf("no package abi in %s", dir)
	}
	var files []*ast.File
	names := make([]string, 0, len(ap.Files))
	for n := range ap.Files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		files = append(files, ap.Files[n])
	}
	conf := types.Config{Importer: importer.ForCompiler(fset, "source", nil)}
	info := &types.Info{Defs: map[*ast.Ident]types.Object{}}
	tpkg, err := conf.Check("github.com/gumbel-go/gumbel/kernelsrc/abi", fset, files, info)
	if err != nil {
		return nil, err
	}
	out := &abiPackage{}
	for _, f := range files {
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok {
				continue
			}
			for _, spec := range gd.Specs {
				switch s := spec.(type) {
				case *ast.ValueSpec:
					if gd.Tok != token.CONST {
						continue
					}
					for _, id := range s.Names {
						c, ok := info.Defs[id].(*types.Const)
						if !ok || !id.IsExported() {
							continue
						}
						doc := s.Doc.Text()
						if doc == "" && len(gd.Specs) == 1 {
							doc = gd.Doc.Text()
						}
						cd := constDecl{name: id.Name, value: c.Val(), doc: trimName(doc, id.Name)}
						if len(gd.Specs) > 1 {
							cd.group = strings.TrimSpace(gd.Doc.Text())
						}
						switch t := c.Type().(type) {
						case *types.Named:
							cd.typ = t.Obj().Name()
							cd.basic = t.Underlying().(*types.Basic).Kind()
						case *types.Basic:
							cd.basic = t.Kind()
						}
						out.consts = append(out.consts, cd)
					}
				case *ast.TypeSpec:
					if s.Name.Name != "RowParams" {
						continue
					}
					st := tpkg.Scope().Lookup("RowParams").Type().Underlying().(*types.Struct)
					vars := make([]*types.Var, st.NumFields())
					for i := range vars {
						vars[i] = st.Field(i)
					}
					offs := types.SizesFor("gc", "amd64").Offsetsof(vars)
					astFields := s.Type.(*ast.StructType).Fields.List
					for i, v := range vars {
						f := field{name: v.Name(), offset: offs[i], count: 1, doc: trimName(astFields[i].Doc.Text(), v.Name())}
						t := v.Type()
						if a, ok := t.(*types.Array); ok {
							f.count, t = int(a.Len()), a.Elem()
						}
						f.basic = t.Underlying().(*types.Basic).Kind()
						out.fields = append(out.fields, f)
					}
				}
			}
		}
	}
	return out, nil
}

// trimName turns a doc comment into one sentence-case line without its leading "Name:",
// "Name is" or "Name are".
func trimName(doc, name string) string {
	doc = strings.Join(strings.Fields(doc), " ")
	if rest, ok := strings.CutPrefix(doc, name); ok {
		rest = strings.TrimSpace(strings.TrimPrefix(rest, ":"))
		for _, verb := range []string{"is ", "are "} {
			rest = strings.TrimPrefix(rest, verb)
		}
		doc = rest
	}
	if r := []rune(doc); len(r) > 0 {
		r[0] = unicode.ToUpper(r[0])
		doc = string(r)
	}
	return doc
}

// compounds are words that C spells as one.
var compounds = map[string]string{"NonFinite": "NONFINITE", "TopN": "TOPN"}

// words splits a Go identifier into its words: "TopNStride" is Top, N, Stride.
func words(name string) []string {
	var ws []string
	start := 0
	rs := []rune(name)
	for i := 1; i < len(rs); i++ {
		if unicode.IsUpper(rs[i]) && (unicode.IsLower(rs[i-1]) || unicode.IsDigit(rs[i-1]) ||
			(i+1 < len(rs) && unicode.IsLower(rs[i+1]))) {
			ws = append(ws, string(rs[start:i]))
			start = i
		}
	}
	return append(ws, string(rs[start:]))
}

// cWords joins the words of a Go identifier with sep, the compounds as one word.
func cWords(name string, upper bool, sep string) string {
	ws := words(name)
	var out []string
	for i := 0; i < len(ws); i++ {
		if i+1 < len(ws) {
			if c, ok := compounds[ws[i]+ws[i+1]]; ok {
				out = append(out, c)
				i++
				continue
			}
		}
		out = append(out, strings.ToUpper(ws[i]))
	}
	s := strings.Join(out, sep)
	if !upper {
		s = strings.ToLower(s)
	}
	return s
}

// CName is the C++ spelling of a Go constant: GB_ and its words in capitals.
func CName(goName string) string { return "GB_" + cWords(goName, true, "_") }

// fieldName is the C++ spelling of a RowParams field.
func fieldName(goName string) string {
	if goName == "_" {
		return "reserved"
	}
	return cWords(goName, false, "_")
}

// cValue is a constant's value in C++.
func cValue(c constDecl) (string, bool) {
	switch c.value.Kind() {
	case constant.Int:
		u, ok := constant.Uint64Val(c.value)
		if !ok {
			i, _ := constant.Int64Val(c.value)
			return strconv.FormatInt(i, 10), true
		}
		switch c.basic {
		case types.Uint32, types.Uint:
			if bits.OnesCount64(u) > 16 {
				return fmt.Sprintf("0x%Xu", u), true
			}
			return strconv.FormatUint(u, 10) + "u", true
		case types.Uint64:
			return fmt.Sprintf("0x%Xull", u), true
		}
		return strconv.FormatUint(u, 10), true
	case constant.Float:
		f, _ := constant.Float64Val(c.value)
		s := strconv.FormatFloat(float64(float32(f)), 'g', -1, 32)
		if !strings.ContainsAny(s, ".e") {
			s += ".0"
		}
		if math.IsInf(f, 0) || math.IsNaN(f) {
			return "", false
		}
		return s + "f", true
	}
	return "", false // strings: kernel names are spelled in the entry points
}

// headerSkip are types whose constants only the host uses.
var headerSkip = map[string]bool{"Arg": true}

func header(p *abiPackage) []byte {
	var b bytes.Buffer
	b.WriteString(`// Code generated by kernelsrc/abi/gen from package abi; DO NOT EDIT.
//
// The sampling kernels' binary interface, for the C++ editions (CUDA/HIP and Metal): the
// constants of package abi, a Go name FooBar spelled GB_FOO_BAR, and the RowParams record.
// kernelsrc/ABI.md says what the kernels compute with them. Each edition includes it once.
`)
	group := "-"
	for _, c := range p.consts {
		if headerSkip[c.typ] {
			continue
		}
		v, ok := cValue(c)
		if !ok {
			continue
		}
		if c.group != group {
			group = c.group
			b.WriteString("\n")
			if group != "" {
				fmt.Fprintf(&b, "// %s\n", strings.Join(strings.Fields(group), " "))
			}
		}
		fmt.Fprintf(&b, "#define %s %s // %s\n", CName(c.name), v, oneLine(c.doc))
	}
	b.WriteString("\n// RowParams (package abi): one launch row's parameters, 64-bit fields as two words, low\n// half first.\nstruct gb_row_params {\n")
	for _, f := range p.fields {
		t := "unsigned int"
		if f.basic == types.Float32 {
			t = "float"
		}
		switch {
		case f.basic == types.Uint64:
			n := fieldName(f.name)
			fmt.Fprintf(&b, "    %s %s_lo, %s_hi; // %s\n", t, n, n, oneLine(f.doc))
		case f.count > 1:
			fmt.Fprintf(&b, "    %s %s[%d]; // %s\n", t, fieldName(f.name), f.count, oneLine(f.doc))
		default:
			fmt.Fprintf(&b, "    %s %s; // %s\n", t, fieldName(f.name), oneLine(f.doc))
		}
	}
	b.WriteString("};\n")
	return b.Bytes()
}

// oneLine shortens a doc comment to its first sentence.
func oneLine(doc string) string {
	if i := strings.Index(doc, ". "); i >= 0 {
		doc = doc[:i+1]
	}
	return doc
}

// Tables of ABI.md live between "<!-- abi:NAME -->" and "<!-- /abi:NAME -->".
var tableMarker = regexp.MustCompile(`(?s)(<!-- abi:([a-z]+) -->\n).*?(<!-- /abi:[a-z]+ -->)`)

func fillTables(md string, p *abiPackage) (string, error) {
	var missing []string
	out := tableMarker.ReplaceAllStringFunc(md, func(m string) string {
		g := tableMarker.FindStringSubmatch(m)
		t, ok := mdTable(g[2], p)
		if !ok {
			missing = append(missing, g[2])
			return m
		}
		return g[1] + t + g[3]
	})
	if len(missing) > 0 {
		return "", fmt.Errorf("ABI.md names unknown tables %v", missing)
	}
	return out, nil
}

func (p *abiPackage) ofType(typ string) []constDecl {
	var cs []constDecl
	for _, c := range p.consts {
		if c.typ == typ {
			cs = append(cs, c)
		}
	}
	return cs
}

var argKind = regexp.MustCompile(`^\(([^)]*)\):\s*(.*)$`)

func mdTable(name string, p *abiPackage) (string, bool) {
	var b strings.Builder
	row := func(cells ...string) { b.WriteString("| " + strings.Join(cells, " | ") + " |\n") }
	switch name {
	case "args":
		row("#", "name", "kind", "meaning")
		row("---:", "---", "---", "---")
		for _, c := range p.ofType("Arg") {
			n, _ := constant.Int64Val(c.value)
			kind, meaning := "", c.doc
			if m := argKind.FindStringSubmatch(c.doc); m != nil {
				kind, meaning = m[1], m[2]
			}
			row(strconv.FormatInt(n, 10), "`"+cWords(strings.TrimPrefix(c.name, "Arg"), false, "_")+"`", kind, meaning)
		}
	case "rowparams":
		row("word", "type", "field", "meaning")
		row("---:", "---", "---", "---")
		for _, f := range p.fields {
			w := f.offset / 4
			t := map[types.BasicKind]string{types.Float32: "f32", types.Uint32: "u32", types.Uint64: "u32 × 2"}[f.basic]
			words := strconv.FormatInt(w, 10)
			n := "`" + fieldName(f.name) + "`"
			switch {
			case f.basic == types.Uint64:
				words = fmt.Sprintf("%d, %d", w, w+1)
				n = fmt.Sprintf("`%s_lo`, `%s_hi`", fieldName(f.name), fieldName(f.name))
			case f.count > 1:
				words = fmt.Sprintf("%d–%d", w, w+int64(f.count)-1)
				t = "u32"
			case f.name == "Flags":
				t = "u32"
			}
			row(words, t, n, f.doc)
		}
	case "flags", "status", "seen":
		typ := map[string]string{"flags": "Flags", "status": "Status", "seen": "Seen"}[name]
		row("value", "C++", "Go", "meaning")
		row("---:", "---", "---", "---")
		for _, c := range p.ofType(typ) {
			v, _ := cValue(c)
			if typ == "Flags" && strings.HasPrefix(c.name, "Flags") {
				continue // groups of flags, not flags
			}
			row("`"+v+"`", "`"+CName(c.name)+"`", "`abi."+c.name+"`", c.doc)
		}
	case "constants":
		row("value", "C++", "Go", "meaning")
		row("---:", "---", "---", "---")
		for _, c := range p.consts {
			if c.typ != "" {
				continue
			}
			v, ok := cValue(c)
			if !ok {
				continue
			}
			row("`"+v+"`", "`"+CName(c.name)+"`", "`abi."+c.name+"`", c.doc)
		}
	default:
		return "", false
	}
	return b.String(), true
}

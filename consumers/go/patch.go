package consumer

import (
	"regexp"
	"strconv"
	"strings"
)

// RFC 6902 JSON Patch, applied as deltaship rebuild applies it (vectors/README.md, "JSON
// Patch"): all or nothing, refused before any operation that would make the object hold
// more than MaxValues values or nest deeper than MaxDepth, or that leaves something other
// than an object.

var (
	patchFields = map[string][]string{"add": {"path", "value"}, "remove": {"path"}, "replace": {"path", "value"}, "move": {"from", "path"}, "copy": {"from", "path"}, "test": {"path", "value"}}
	pointerText = regexp.MustCompile(`^(/([^~/]|~[01])*)*$`)
	indexText   = regexp.MustCompile(`^(0|[1-9][0-9]*)$`)
)

// operations checks that data is a JSON Patch (wrong_type otherwise).
func operations(data any) ([]map[string]any, error) {
	list, ok := data.([]any)
	if !ok {
		return nil, badf("wrong_type", "the data is not a JSON Patch: not an array")
	}
	ops := make([]map[string]any, 0, len(list))
	for n, item := range list {
		op, ok := item.(map[string]any)
		kind, _ := op["op"].(string)
		if !ok || patchFields[kind] == nil {
			return nil, badf("wrong_type", "the data is not a JSON Patch: operation %d has no known op", n)
		}
		for _, name := range patchFields[kind] {
			v, present := op[name]
			if !present {
				return nil, badf("wrong_type", "the data is not a JSON Patch: operation %d has no %s", n, name)
			}
			if p, isText := v.(string); (name == "path" || name == "from") && !(isText && pointerText.MatchString(p)) {
				return nil, badf("wrong_type", "the data is not a JSON Patch: operation %d's %s is not a JSON Pointer", n, name)
			}
		}
		ops = append(ops, op)
	}
	return ops, nil
}

func unescape(token string) string {
	return strings.ReplaceAll(strings.ReplaceAll(token, "~1", "/"), "~0", "~")
}

// get is the value at pointer, if there is one.
func get(doc any, pointer string) (any, bool) {
	if pointer == "" {
		return doc, true
	}
	if !strings.HasPrefix(pointer, "/") {
		return nil, false
	}
	for _, t := range strings.Split(pointer, "/")[1:] {
		t = unescape(t)
		switch x := doc.(type) {
		case map[string]any:
			v, ok := x[t]
			if !ok {
				return nil, false
			}
			doc = v
		case []any:
			i, err := strconv.Atoi(t)
			if !indexText.MatchString(t) || err != nil || i >= len(x) {
				return nil, false
			}
			doc = x[i]
		default:
			return nil, false
		}
	}
	return doc, true
}

func notApplied(format string, args ...any) error { return badf("patch_not_applied", format, args...) }

// at splits pointer into its parent's pointer and its last token (unescaped).
func at(pointer string) (string, string) {
	cut := strings.LastIndex(pointer, "/")
	return pointer[:cut], unescape(pointer[cut+1:])
}

func index(token string, length int, pastEnd bool) (int, error) {
	i := length
	if token != "-" {
		n, err := strconv.Atoi(token)
		if !indexText.MatchString(token) || err != nil {
			return 0, notApplied("%q is not an array index", token)
		}
		i = n
	}
	if i > length || i == length && !pastEnd {
		return 0, notApplied("index %s is out of bounds", token)
	}
	return i, nil
}

// set puts v at pointer (add): the new document.
func set(doc any, pointer string, v any) (any, error) {
	if pointer == "" {
		return v, nil
	}
	parentPointer, last := at(pointer)
	parent, ok := get(doc, parentPointer)
	if !ok {
		return nil, notApplied("no parent for %s", pointer)
	}
	switch p := parent.(type) {
	case map[string]any:
		p[last] = v
	case []any:
		i, err := index(last, len(p), true)
		if err != nil {
			return nil, err
		}
		p = append(p, nil)
		copy(p[i+1:], p[i:])
		p[i] = v
		return replaceAt(doc, parentPointer, p), nil
	default:
		return nil, notApplied("no parent for %s", pointer)
	}
	return doc, nil
}

// replaceAt stores v at an existing pointer (arrays change when they grow or shrink).
func replaceAt(doc any, pointer string, v any) any {
	if pointer == "" {
		return v
	}
	parentPointer, last := at(pointer)
	parent, _ := get(doc, parentPointer)
	switch p := parent.(type) {
	case map[string]any:
		p[last] = v
	case []any:
		i, _ := strconv.Atoi(last)
		p[i] = v
	}
	return doc
}

// remove takes the value at pointer out: the new document and the value.
func remove(doc any, pointer string) (any, any, error) {
	if pointer == "" {
		return nil, nil, notApplied("cannot remove the whole document")
	}
	parentPointer, last := at(pointer)
	parent, ok := get(doc, parentPointer)
	if !ok {
		return nil, nil, notApplied("no parent for %s", pointer)
	}
	switch p := parent.(type) {
	case map[string]any:
		v, ok := p[last]
		if !ok {
			return nil, nil, notApplied("nothing at %s", pointer)
		}
		delete(p, last)
		return doc, v, nil
	case []any:
		i, err := index(last, len(p), false)
		if err != nil {
			return nil, nil, err
		}
		v := p[i]
		shorter := append(append([]any{}, p[:i]...), p[i+1:]...)
		return replaceAt(doc, parentPointer, shorter), v, nil
	}
	return nil, nil, notApplied("no parent for %s", pointer)
}

func inside(path, start string) bool {
	return len(path) > len(start) && strings.HasPrefix(path, start) && path[len(start)] == '/'
}

func applyOp(doc any, op map[string]any) (any, error) {
	path, _ := op["path"].(string)
	from, _ := op["from"].(string)
	switch op["op"] {
	case "add":
		return set(doc, path, clone(op["value"]))
	case "remove":
		doc, _, err := remove(doc, path)
		return doc, err
	case "replace":
		if _, ok := get(doc, path); !ok {
			return nil, notApplied("nothing at %s", path)
		}
		return replaceAt(doc, path, clone(op["value"])), nil
	case "move":
		if inside(path, from) {
			return nil, notApplied("cannot move a value inside itself")
		}
		doc, v, err := remove(doc, from)
		if err != nil {
			return nil, err
		}
		return set(doc, path, v)
	case "copy":
		v, ok := get(doc, from)
		if !ok {
			return nil, notApplied("nothing at %s", from)
		}
		return set(doc, path, clone(v))
	}
	v, ok := get(doc, path)
	if !ok {
		return nil, notApplied("nothing at %s", path)
	}
	if !same(v, op["value"]) {
		return nil, notApplied("test failed at %s", path)
	}
	return doc, nil
}

// patched is stored with ops applied (stored is left as it was).
func patched(stored any, ops []map[string]any) (any, error) {
	doc := clone(stored)
	values, _ := measure(doc)
	for _, op := range ops {
		kind := op["op"].(string)
		if kind != "remove" && kind != "test" {
			var source any
			found := true
			if kind == "add" || kind == "replace" {
				source = op["value"]
			} else {
				source, found = get(doc, op["from"].(string))
			}
			count, depth := 0, 0
			if found {
				count, depth = measure(source)
			}
			// Values only grow by what is added, replaced in or copied (an upper bound).
			if kind != "move" {
				values += count
			}
			if values > MaxValues {
				return nil, notApplied("the patch would make the object hold more than %d JSON values", MaxValues)
			}
			if strings.Count(op["path"].(string), "/")+depth > MaxDepth {
				return nil, notApplied("the patch would nest the object deeper than %d levels", MaxDepth)
			}
		} else if values > MaxValues {
			return nil, notApplied("the patch would make the object hold more than %d JSON values", MaxValues)
		}
		var err error
		if doc, err = applyOp(doc, op); err != nil {
			return nil, err
		}
	}
	if _, ok := doc.(map[string]any); !ok {
		return nil, notApplied("the patch would make the object something other than an object")
	}
	return doc, nil
}

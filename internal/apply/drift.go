package apply

import (
	"encoding/base64"
	"reflect"
	"strconv"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/structured-merge-diff/v6/value"
)

// disagreement returns the path of the first field set in desired whose
// value differs in live, or "" when live agrees with every field we set.
// Fields the server or others added are ignored; a desired list must be
// a prefix of the live one, element by element. The top-level apiVersion
// and kind are not compared: objects from the cache carry no type meta.
//
// Both objects are compared as JSON reads them (field names, omitempty,
// the encoders of quantities, times and int-or-strings, base64 for bytes,
// numbers by value), but neither is encoded nor read whole: the walk goes
// by reflection, along the desired fields only, with the unstructured
// converter's own field tables. The server's defaults, the status and the
// managedFields of the live object cost nothing (docs/benchmarks.md).
func disagreement(desired, live any) string {
	if u, ok := live.(*unstructured.Unstructured); ok {
		live = u.Object // not through its JSON encoder
	}
	if at, ok := agree(reflect.ValueOf(desired), reflect.ValueOf(live), true); !ok {
		return at
	}
	return ""
}

// agree reports whether live holds every field of desired with desired's
// value; when not, it also returns the path below here to the first that
// differs, built only then (a converged pass finds none). Either side may
// be a typed Go value or an unstructured one (maps, lists, scalars).
func agree(desired, live reflect.Value, top bool) (string, bool) {
	desired, err := resolve(desired)
	if err != nil {
		return " (desired: " + err.Error() + ")", false
	}
	live, err = resolve(live)
	if err != nil {
		return " (live: " + err.Error() + ")", false
	}
	if !desired.IsValid() || !live.IsValid() {
		return "", desired.IsValid() == live.IsValid()
	}
	if object(desired) && !object(live) {
		return "", false
	}
	switch desired.Kind() {
	case reflect.Struct:
		for _, f := range value.TypeReflectEntryOf(desired.Type()).OrderedFields() {
			v := f.GetFrom(desired)
			if f.CanOmit(v) || top && typeMeta(f.JsonName) {
				continue
			}
			if at, ok := agree(v, member(live, f.JsonName), false); !ok {
				return "." + f.JsonName + at, false
			}
		}
	case reflect.Map:
		if desired.Type().Key().Kind() != reflect.String {
			return "", false
		}
		for it := desired.MapRange(); it.Next(); {
			k := it.Key().String()
			if top && typeMeta(k) {
				continue
			}
			if at, ok := agree(it.Value(), member(live, k), false); !ok {
				return "." + k + at, false
			}
		}
	case reflect.Slice:
		if live.Kind() != reflect.Slice || live.Len() < desired.Len() {
			return "", false
		}
		for i := range desired.Len() {
			if at, ok := agree(desired.Index(i), live.Index(i), false); !ok {
				return "[" + strconv.Itoa(i) + "]" + at, false
			}
		}
	default:
		return "", sameScalar(desired, live)
	}
	return "", true
}

func typeMeta(field string) bool { return field == "apiVersion" || field == "kind" }

// object reports whether a resolved value reads as a JSON object.
func object(v reflect.Value) bool { return v.Kind() == reflect.Struct || v.Kind() == reflect.Map }

// resolve steps down to what JSON would encode for v: through pointers
// and interfaces, through the encoder of a type that has its own (to the
// unstructured value it gives), and from bytes to their base64 string.
// It returns an invalid Value for what JSON reads as null or leaves out:
// a nil pointer, interface, map or slice.
func resolve(v reflect.Value) (reflect.Value, error) {
	for v.IsValid() {
		if v.Type() == intOrString {
			// its encoder has no direct form, and would go through JSON
			n := v.Interface().(intstr.IntOrString)
			if n.Type == intstr.String {
				return reflect.ValueOf(n.StrVal), nil
			}
			return reflect.ValueOf(int64(n.IntVal)), nil
		}
		if entry := value.TypeReflectEntryOf(v.Type()); entry.CanConvertToUnstructured() {
			u, err := entry.ToUnstructured(v)
			if err != nil {
				return reflect.Value{}, err
			}
			return reflect.ValueOf(u), nil // a plain unstructured value from here on
		}
		switch v.Kind() {
		case reflect.Pointer, reflect.Interface:
			if v.IsNil() {
				return reflect.Value{}, nil
			}
			v = v.Elem()
			continue
		case reflect.Map:
			if v.IsNil() {
				return reflect.Value{}, nil
			}
		case reflect.Slice:
			if v.IsNil() {
				return reflect.Value{}, nil
			}
			if v.Type().Elem().Kind() == reflect.Uint8 {
				return reflect.ValueOf(base64.StdEncoding.EncodeToString(v.Bytes())), nil
			}
		}
		return v, nil
	}
	return v, nil
}

var intOrString = reflect.TypeFor[intstr.IntOrString]()

// member is the field or entry called name of a resolved struct or map,
// as JSON reads it: an invalid Value when it is missing or left out by
// omitempty or omitzero.
func member(v reflect.Value, name string) reflect.Value {
	switch v.Kind() {
	case reflect.Struct:
		f, ok := value.TypeReflectEntryOf(v.Type()).Fields()[name]
		if !ok {
			return reflect.Value{}
		}
		if fv := f.GetFrom(v); !f.CanOmit(fv) {
			return fv
		}
	case reflect.Map:
		if k := v.Type().Key(); k.Kind() == reflect.String {
			return v.MapIndex(reflect.ValueOf(name).Convert(k))
		}
	}
	return reflect.Value{}
}

// sameScalar compares two resolved scalars as JSON values: strings and
// booleans by kind and value, numbers by value whatever their Go type.
func sameScalar(a, b reflect.Value) bool {
	switch a.Kind() {
	case reflect.String:
		return b.Kind() == reflect.String && a.String() == b.String()
	case reflect.Bool:
		return b.Kind() == reflect.Bool && a.Bool() == b.Bool()
	}
	m, ok := number(a)
	n, same := number(b)
	return ok && same && m == n
}

// number reads a resolved number as a float64, whatever its Go type: an
// int32 of a typed object, an int64 from the converter, a float64 from
// JSON.
func number(v reflect.Value) (float64, bool) {
	switch v.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return float64(v.Int()), true
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return float64(v.Uint()), true
	case reflect.Float32, reflect.Float64:
		return v.Float(), true
	}
	return 0, false
}

// controllerUID returns the uid of the desired object's controller
// owner reference, if it names one.
func controllerUID(desired any) (string, bool) {
	refs := at(reflect.ValueOf(desired), "metadata", "ownerReferences")
	if refs.Kind() != reflect.Slice {
		return "", false
	}
	for i := range refs.Len() {
		if controller := at(refs.Index(i), "controller"); controller.Kind() == reflect.Bool && controller.Bool() {
			uid := at(refs.Index(i), "uid")
			return uid.String(), uid.Kind() == reflect.String
		}
	}
	return "", false
}

// at resolves the member at the path of names below v; an encoder's
// error reads as a missing member.
func at(v reflect.Value, names ...string) reflect.Value {
	v, _ = resolve(v)
	for _, name := range names {
		v, _ = resolve(member(v, name))
	}
	return v
}

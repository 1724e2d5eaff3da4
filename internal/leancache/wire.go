package leancache

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"sync"
	"time"
	"unique"

	"google.golang.org/protobuf/encoding/protowire"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
)

// An informer of a kind held encoded would decode every object the API
// server sends, whole, only for the cache to encode it again (encodedAs).
// A wire informer skips both: its objects are cut out of the protobuf the
// API server sent (list items and watch events alike), managedFields
// dropped, and only the metadata the cache reads on every event (name,
// namespace, resource version, owner references) is parsed. That matters
// most to a restarted operator, which receives every child it manages at
// once (BenchmarkChildFromTheWire; docs/benchmarks.md, B8's restart).

// protoMagic starts every protobuf body of the API server (k8s.io's
// runtime/serializer/protobuf): a runtime.Unknown follows.
var protoMagic = []byte("k8s\x00")

// ObjectMeta's protobuf field numbers (k8s.io/apimachinery's generated.proto).
const (
	metaName            = 1
	metaNamespace       = 3
	metaResourceVersion = 6
	metaOwnerReferences = 13
	metaManagedFields   = 17
)

// fromWire makes an encoded child of the protobuf of one object (without
// the envelope), as Marshal would have made it with managedFields cleared.
// It allocates the encoding once, at its size.
func fromWire[T any, P interface {
	*T
	protoObject
}](object []byte) (*encoded[T, P], error) {
	// The metadata (field 1) and where it lies.
	var metadata []byte
	metaStart, metaEnd := -1, -1
	for off := 0; off < len(object); {
		num, value, n, err := nextField(object[off:])
		if err != nil {
			return nil, err
		}
		if num == 1 && value != nil {
			if metaStart >= 0 {
				return nil, fmt.Errorf("metadata given twice")
			}
			metadata, metaStart, metaEnd = value, off, off+n
		}
		off += n
	}
	if metaStart < 0 {
		return nil, fmt.Errorf("no metadata")
	}
	// Its fields: what the wrapper keeps, and the size without
	// managedFields.
	e := &encoded[T, P]{namespace: unique.Make("")}
	kept := len(metadata)
	owners := make([]metav1.OwnerReference, 0, 1) // one, nearly always: on the stack
	for b := metadata; len(b) > 0; {
		num, value, n, err := nextField(b)
		if err != nil {
			return nil, err
		}
		switch {
		case value == nil:
		case num == metaManagedFields:
			kept -= n
		case num == metaName:
			e.name = string(value)
		case num == metaNamespace:
			e.namespace = unique.Make(string(value))
		case num == metaResourceVersion:
			e.resourceVersion = string(value)
		case num == metaOwnerReferences:
			var r metav1.OwnerReference
			if err := r.Unmarshal(value); err != nil {
				return nil, err
			}
			owners = append(owners, r)
		}
		b = b[n:]
	}
	e.owner = ownersOf(owners)
	// The metadata first, as Marshal writes it, then the other fields.
	raw := make([]byte, 0, protowire.SizeTag(1)+protowire.SizeBytes(kept)+len(object)-(metaEnd-metaStart))
	raw = protowire.AppendVarint(protowire.AppendTag(raw, 1, protowire.BytesType), uint64(kept))
	for b := metadata; len(b) > 0; {
		num, _, n, _ := nextField(b) // read above
		if num != metaManagedFields {
			raw = append(raw, b[:n]...)
		}
		b = b[n:]
	}
	e.raw = append(append(raw, object[:metaStart]...), object[metaEnd:]...)
	return e, nil
}

// encodedList is the list of a kind held encoded, as a wire informer
// reads it.
type encodedList[T any, P interface {
	*T
	protoObject
}] struct {
	metav1.ListMeta
	Items []*encoded[T, P]
}

func (*encodedList[T, P]) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject shares the items, which are read-only.
func (l *encodedList[T, P]) DeepCopyObject() runtime.Object {
	c := &encodedList[T, P]{Items: slices.Clone(l.Items)}
	l.DeepCopyInto(&c.ListMeta)
	return c
}

// unmarshal reads the protobuf of a list: its ListMeta (field 1) and its
// items (field 2), as every list of a built-in kind has them.
func (l *encodedList[T, P]) unmarshal(data []byte) error {
	for b := data; len(b) > 0; {
		num, value, n, err := nextField(b)
		if err != nil {
			return err
		}
		switch {
		case value == nil:
		case num == 1:
			if err := l.ListMeta.Unmarshal(value); err != nil { //nolint:staticcheck // the ListMeta's, not a method of the list
				return err
			}
		case num == 2:
			item, err := fromWire[T, P](value)
			if err != nil {
				return err
			}
			l.Items = append(l.Items, item)
		}
		b = b[n:]
	}
	return nil
}

// wireDecoder decodes the objects and lists of one kind held encoded, and
// hands anything else (a Status) to the usual decoder.
type wireDecoder[T any, P interface {
	*T
	protoObject
}] struct {
	runtime.Serializer
	kind string
}

func (d wireDecoder[T, P]) Decode(data []byte, defaults *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	gvk, raw, ok := envelope(data)
	switch list, isList := into.(*encodedList[T, P]); {
	case !ok:
	case isList && gvk.Kind == d.kind+"List":
		return list, &gvk, list.unmarshal(raw)
	case into == nil && gvk.Kind == d.kind:
		e, err := fromWire[T, P](raw)
		if err != nil {
			return nil, &gvk, fmt.Errorf("decoding a %s: %w", d.kind, err)
		}
		return e, &gvk, nil
	}
	return d.Serializer.Decode(data, defaults, into)
}

// envelope reads the runtime.Unknown a protobuf body of the API server
// is (protoMagic, then the Unknown): the kind, and the object's protobuf,
// not copied. ok is false for anything else.
func envelope(data []byte) (gvk schema.GroupVersionKind, raw []byte, ok bool) {
	if !bytes.HasPrefix(data, protoMagic) {
		return gvk, nil, false
	}
	var typeMeta []byte
	for b := data[len(protoMagic):]; len(b) > 0; {
		num, value, n, err := nextField(b)
		switch {
		case err != nil:
			return gvk, nil, false
		case num == 1:
			typeMeta = value
		case num == 2:
			raw = value
		case len(value) > 0: // contentEncoding or contentType: none from the API server
			return gvk, nil, false
		}
		b = b[n:]
	}
	var apiVersion string
	for b := typeMeta; len(b) > 0; {
		num, value, n, err := nextField(b)
		if err != nil {
			return gvk, nil, false
		}
		switch num {
		case 1:
			apiVersion = string(value)
		case 2:
			gvk.Kind = string(value)
		}
		b = b[n:]
	}
	gv, err := schema.ParseGroupVersion(apiVersion)
	return gv.WithKind(gvk.Kind), raw, err == nil
}

// nextField reads the protobuf field b starts with: its number, its value
// if it is length-delimited (nil otherwise), and its length.
func nextField(b []byte) (num protowire.Number, value []byte, n int, err error) {
	num, typ, n := protowire.ConsumeField(b)
	if n < 0 {
		return 0, nil, 0, protowire.ParseError(n)
	}
	if typ == protowire.BytesType {
		value, _ = protowire.ConsumeBytes(b[protowire.SizeTag(num):n])
	}
	return num, value, n, nil
}

// wireSerializer is client-go's, but for the protobuf decoder of one kind
// held encoded (wireDecoder). Watch events are framed and decoded as ever;
// the objects in them go through the wireDecoder.
type wireSerializer struct {
	runtime.NegotiatedSerializer
	protobuf runtime.Serializer
}

func (s wireSerializer) SupportedMediaTypes() []runtime.SerializerInfo {
	infos := slices.Clone(s.NegotiatedSerializer.SupportedMediaTypes())
	for i := range infos {
		if infos[i].MediaType == runtime.ContentTypeProtobuf {
			infos[i].Serializer = s.protobuf
		}
	}
	return infos
}

// wireKind is how a wire informer reads one kind held encoded.
type wireKind struct {
	gvk      schema.GroupVersionKind
	resource string
	// exemplar is an empty encoded child: the type the informer's objects
	// have.
	exemplar runtime.Object
	list     func() runtime.Object
	decoder  func(next runtime.Serializer) runtime.Serializer
}

func wireKindOf[T any, P interface {
	*T
	protoObject
}]() (reflect.Type, wireKind) {
	gvks, _, err := clientgoscheme.Scheme.ObjectKinds(P(new(T)))
	if err != nil {
		panic(err) // a built-in kind: always registered
	}
	gvk := gvks[0]
	plural, _ := meta.UnsafeGuessKindToResource(gvk) // the built-in kinds' plurals are regular
	return reflect.TypeFor[P](), wireKind{
		gvk: gvk, resource: plural.Resource,
		exemplar: &encoded[T, P]{},
		list:     func() runtime.Object { return &encodedList[T, P]{} },
		decoder: func(next runtime.Serializer) runtime.Serializer {
			return wireDecoder[T, P]{Serializer: next, kind: gvk.Kind}
		},
	}
}

// wireInformers returns the cache's NewInformer: the kinds in kinds are
// read from the wire (wire.go's comment), each with the label selector
// given, across all namespaces; the others as controller-runtime reads
// them. A kind whose client cannot be made falls back to
// controller-runtime's (slower, and said in the log).
func wireInformers(config *rest.Config, selector string, kinds map[reflect.Type]wireKind) func(toolscache.ListerWatcher, runtime.Object, time.Duration, toolscache.Indexers) toolscache.SharedIndexInformer {
	httpClient := sync.OnceValues(func() (*http.Client, error) { return rest.HTTPClientFor(config) })
	return func(lw toolscache.ListerWatcher, obj runtime.Object, resync time.Duration, indexers toolscache.Indexers) toolscache.SharedIndexInformer {
		if kind, ok := kinds[reflect.TypeOf(obj)]; ok {
			wire, err := kind.listWatch(config, httpClient, selector)
			if err == nil {
				lw, obj = wire, kind.exemplar
			} else {
				logf.Log.WithName("cache").Error(err, "Reading the kind decoded instead of from the wire", "kind", kind.gvk.Kind)
			}
		}
		return toolscache.NewSharedIndexInformer(lw, obj, resync, indexers)
	}
}

func (k wireKind) listWatch(config *rest.Config, httpClient func() (*http.Client, error), selector string) (toolscache.ListerWatcher, error) {
	hc, err := httpClient()
	if err != nil {
		return nil, err
	}
	cfg := rest.CopyConfig(config)
	gv := k.gvk.GroupVersion()
	cfg.GroupVersion, cfg.APIPath = &gv, "/apis"
	if gv.Group == "" {
		cfg.APIPath = "/api"
	}
	cfg.ContentType = runtime.ContentTypeProtobuf
	cfg.AcceptContentTypes = runtime.ContentTypeProtobuf
	codecs := clientgoscheme.Codecs.WithoutConversion()
	info, _ := runtime.SerializerInfoForMediaType(codecs.SupportedMediaTypes(), runtime.ContentTypeProtobuf)
	cfg.NegotiatedSerializer = wireSerializer{NegotiatedSerializer: codecs, protobuf: k.decoder(info.Serializer)}
	client, err := rest.RESTClientForConfigAndClient(cfg, hc)
	if err != nil {
		return nil, err
	}
	request := func(opts *metav1.ListOptions) *rest.Request {
		opts.LabelSelector = selector
		return client.Get().Resource(k.resource).VersionedParams(opts, clientgoscheme.ParameterCodec)
	}
	return &toolscache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			list := k.list()
			if err := request(&opts).Do(ctx).Into(list); err != nil {
				return nil, err
			}
			return list, nil
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.Watch, opts.AllowWatchBookmarks = true, true
			return request(&opts).Watch(ctx)
		},
	}, nil
}

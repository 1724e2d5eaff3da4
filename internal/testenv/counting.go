package testenv

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"sync"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// CountingClient wraps a client and counts its write calls by verb and
// kind, in all and by namespace, so tests can assert how many writes a
// reconcile made.
type CountingClient struct {
	client.Client
	mu          sync.Mutex
	writes      map[string]int
	byNamespace map[string]map[string]int
}

// NewCountingClient wraps c.
func NewCountingClient(c client.Client) *CountingClient {
	return &CountingClient{Client: c, writes: map[string]int{}, byNamespace: map[string]map[string]int{}}
}

func (c *CountingClient) count(verb string, obj any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	kind := reflect.TypeOf(obj).Elem().Name()
	if k, ok := obj.(interface{ GetKind() string }); ok && k.GetKind() != "" {
		kind = k.GetKind() // an unstructured apply configuration
	}
	var ns string
	switch o := obj.(type) {
	case interface{ GetNamespace() string }:
		ns = o.GetNamespace()
	case interface{ GetNamespace() *string }: // an apply configuration
		if p := o.GetNamespace(); p != nil {
			ns = *p
		}
	}
	key := fmt.Sprintf("%s %s", verb, kind)
	c.writes[key]++
	if c.byNamespace[ns] == nil {
		c.byNamespace[ns] = map[string]int{}
	}
	c.byNamespace[ns][key]++
}

// Writes returns a copy of the counts, keyed "verb Kind".
func (c *CountingClient) Writes() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.writes)
}

// WritesIn returns a copy of the counts of writes to objects in namespace
// ns, keyed "verb Kind": a test's own, whatever the operator still does
// for the objects of earlier tests.
func (c *CountingClient) WritesIn(ns string) map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.byNamespace[ns])
}

// Total is the number of writes so far.
func (c *CountingClient) Total() int {
	n := 0
	for _, v := range c.Writes() {
		n += v
	}
	return n
}

func (c *CountingClient) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	c.count("create", obj)
	return c.Client.Create(ctx, obj, opts...)
}

func (c *CountingClient) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	c.count("update", obj)
	return c.Client.Update(ctx, obj, opts...)
}

func (c *CountingClient) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	verb := "patch"
	if patch.Type() == types.ApplyPatchType { // the apply engine's raw apply patches
		verb = "apply"
	}
	c.count(verb, obj)
	return c.Client.Patch(ctx, obj, patch, opts...)
}

func (c *CountingClient) Apply(ctx context.Context, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
	c.count("apply", obj)
	return c.Client.Apply(ctx, obj, opts...)
}

func (c *CountingClient) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	c.count("delete", obj)
	return c.Client.Delete(ctx, obj, opts...)
}

func (c *CountingClient) DeleteAllOf(ctx context.Context, obj client.Object, opts ...client.DeleteAllOfOption) error {
	c.count("deletecollection", obj)
	return c.Client.DeleteAllOf(ctx, obj, opts...)
}

func (c *CountingClient) Status() client.SubResourceWriter {
	return &countingStatus{SubResourceWriter: c.Client.Status(), c: c}
}

type countingStatus struct {
	client.SubResourceWriter
	c *CountingClient
}

func (s *countingStatus) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	s.c.count("update-status", obj)
	return s.SubResourceWriter.Update(ctx, obj, opts...)
}

func (s *countingStatus) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	s.c.count("patch-status", obj)
	return s.SubResourceWriter.Patch(ctx, obj, patch, opts...)
}

func (s *countingStatus) Apply(ctx context.Context, obj runtime.ApplyConfiguration, opts ...client.SubResourceApplyOption) error {
	s.c.count("apply-status", obj)
	return s.SubResourceWriter.Apply(ctx, obj, opts...)
}

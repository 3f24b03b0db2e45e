package watch

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/netready/netready/pkg/config"
	"github.com/netready/netready/pkg/kubeapi"
	"github.com/netready/netready/pkg/pool/calico"
	"github.com/netready/netready/pkg/pool/ovn"
)

// clusterSource is a ClusterSource with the watches it runs.
type clusterSource interface {
	ClusterSource
	Run(ctx context.Context)
}

// clusterSources makes the sources of pools whose truth is in the API
// server, each at the first count that needs it, so that a node whose
// networks need none watches nothing for them (and needs none of their
// RBAC). Each runs its watches until the pool watch releases it, or ctx,
// the sidecar's, ends.
type clusterSources struct {
	ctx  context.Context
	cfg  *rest.Config
	node string
	log  *slog.Logger

	mu   sync.Mutex
	made map[string]clusterSource
}

// FromAPIServer is the ClusterSources of the sidecar: each source reads
// the API server at cfg for node, as long as ctx lasts.
func FromAPIServer(ctx context.Context, cfg *rest.Config, node string, log *slog.Logger) ClusterSources {
	return newClusterSources(ctx, cfg, node, log).get
}

func newClusterSources(ctx context.Context, cfg *rest.Config, node string, log *slog.Logger) *clusterSources {
	return &clusterSources{ctx: ctx, cfg: cfg, node: node, log: log.With("part", "pool"), made: map[string]clusterSource{}}
}

// get is ClusterSources.
func (c *clusterSources) get(typ string) (ClusterSource, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s, ok := c.made[typ]; ok {
		return s, nil
	}
	var (
		s   clusterSource
		err error
	)
	switch typ {
	case config.IPAMOVN:
		s, err = c.ovn()
	case config.IPAMCalico:
		s, err = c.calico()
	default:
		return nil, fmt.Errorf("netready-sidecar cannot count a pool of type %q from the API server", typ)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", typ, err)
	}
	c.log.Info("counting a pool from the API server", "source", typ)
	ctx, cancel := context.WithCancel(c.ctx)
	go s.Run(ctx)
	m := &madeSource{clusterSource: s}
	m.release = func() {
		c.mu.Lock()
		if c.made[typ] == m {
			delete(c.made, typ)
		}
		c.mu.Unlock()
		cancel()
	}
	c.made[typ] = m
	return m, nil
}

// madeSource is a source that runs until the pool watch releases it
// (Releaser), when no network counts from it any more.
type madeSource struct {
	clusterSource
	release func()
}

func (m *madeSource) Release() { m.release() }

// ovn reads the node's pods and its Node, which the sidecar's own RBAC
// allows, through a client of its own: its list never queues the
// sidecar's pod and Node writes.
func (c *clusterSources) ovn() (clusterSource, error) {
	client, err := kubeapi.NewREST(c.cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return ovn.New(ovn.Options{Client: client, Node: c.node, Log: c.log}), nil
}

// calico watches Calico's IPAM objects. Only deploy/components/calico
// grants reading them: without it the source cannot tell, naming the
// component (calico.Watcher.Count), and nothing fails.
func (c *clusterSources) calico() (clusterSource, error) {
	dyn, err := dynamic.NewForConfig(c.cfg)
	if err != nil {
		return nil, fmt.Errorf("dynamic client: %w", err)
	}
	return calico.New(calico.Options{Dynamic: dyn, Node: c.node, Log: c.log}), nil
}

// Package checks owns what "programmed" means: one Check per configured
// kind and target, each able to probe the kernel or an agent once and to
// name the events that may change its answer.
package checks

import (
	"context"
	"errors"
	"fmt"

	"github.com/netready/netready/pkg/attachment"
	"github.com/netready/netready/pkg/config"
	"github.com/netready/netready/pkg/watch"
)

// Check is one condition for one target.
type Check interface {
	// Kind is the configured kind, e.g. "route".
	Kind() string
	// Target names what is checked, e.g. the pod IP "10.1.0.5".
	Target() string
	// Probe looks once. It returns ready, or why not. An error wrapping
	// ErrNever means the check can never succeed; any other error is
	// transient and the probe is repeated.
	Probe(ctx context.Context) (ready bool, why string, err error)
	// Sources are the event streams whose events may change the answer. A
	// check with none is polled.
	Sources() []watch.Source
}

// kind is what Build and the wait know of one check kind. Each lives in
// its own file, with its checks.
type kind struct {
	name string
	// perIP, if set, says whether the kind is made once per pod IP
	// whatever its strings say (a {{.IP}} in them makes any kind so).
	perIP func(cc *config.CheckConf) bool
	// kernelOnly: its probes ask only the kernel (netlink, a local file),
	// never an agent or a child process, so they return at once and
	// cannot hang.
	kernelOnly bool
	// build makes the kind's checks from its instances: the configured
	// check with its placeholders filled once per pod IP, or once.
	build func(in []instance, att *attachment.Attachment, env *Env) ([]Check, error)
}

// instance is a configured check with its placeholders filled, for one
// pod IP (ip) or for none (ip nil: the check is not made per IP).
type instance struct {
	conf config.CheckConf
	ip   *attachment.IP
}

// kinds are the check kinds, as config.Kinds lists them.
var kinds = []kind{
	{name: config.KindAddress, perIP: always, kernelOnly: true, build: buildAddress},
	{name: config.KindRoute, perIP: always, kernelOnly: true, build: buildRoute},
	{name: config.KindGateway, perIP: always, kernelOnly: true, build: buildGateway},
	{name: config.KindIPTables, build: buildIPTables},
	{name: config.KindNFTables, perIP: nftPerIP, kernelOnly: true, build: buildNFTables},
	{name: config.KindFile, kernelOnly: true, build: buildFile},
	{name: config.KindHTTP, build: buildHTTP},
	{name: config.KindOVSDB, build: buildOVSDB},
}

func always(*config.CheckConf) bool { return true }

// kindOf returns the kind called name.
func kindOf(name string) (kind, bool) {
	for _, k := range kinds {
		if k.name == name {
			return k, true
		}
	}
	return kind{}, false
}

// KernelOnly reports whether c's probe asks only the kernel (netlink, a local
// file), never an agent or a child process, so that it returns at once and
// cannot hang.
func KernelOnly(c Check) bool {
	if _, ok := c.(*noIPCheck); ok {
		return true
	}
	k, ok := kindOf(c.Kind())
	return ok && k.kernelOnly
}

// ErrNever marks a check that can never succeed, e.g. its netns is gone.
var ErrNever = errors.New("can never succeed")

// ErrNetnsGone marks, beside ErrNever, a pod netns that is gone or never
// was: the one "never" that fails ADD whatever onTimeout says, as there is
// no pod left to start.
var ErrNetnsGone = errors.New("the pod netns is gone")

func netnsGone(format string, args ...any) error {
	return fmt.Errorf("%w: %w: %s", ErrNever, ErrNetnsGone, fmt.Sprintf(format, args...))
}

func never(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrNever, fmt.Sprintf(format, args...))
}

// Describe names a check for messages: "route 10.1.0.5".
func Describe(c Check) string {
	return c.Kind() + " " + c.Target()
}

// Build turns the configured checks into Checks for one attachment. Checks
// that apply per IP (address, route, gateway, an nftables set, or any
// using {{.IP}}) are made once per pod IP.
func Build(confs []config.CheckConf, att *attachment.Attachment, env *Env) ([]Check, error) {
	var out []Check
	for i := range confs {
		cs, err := build(&confs[i], att, env)
		if err != nil {
			return nil, fmt.Errorf("checks[%d] (%s): %w", i, confs[i].Kind, err)
		}
		out = append(out, cs...)
	}
	return out, nil
}

// build fills the placeholders of cc, once per pod IP when the check is
// made per IP and once otherwise, and hands the instances to its kind.
func build(cc *config.CheckConf, att *attachment.Attachment, env *Env) ([]Check, error) {
	k, ok := kindOf(cc.Kind)
	if !ok {
		return nil, fmt.Errorf("unknown check kind %q", cc.Kind)
	}
	perIP := (k.perIP != nil && k.perIP(cc)) || cc.UsesIP()
	if perIP && len(att.IPs) == 0 {
		return []Check{&noIPCheck{kind: cc.Kind, env: env, ifName: att.IfName}}, nil
	}
	var in []instance
	if !perIP {
		conf, err := cc.Expanded(placeholders(att, nil))
		if err != nil {
			return nil, err
		}
		in = append(in, instance{conf: conf})
	}
	for i := 0; perIP && i < len(att.IPs); i++ {
		ip := &att.IPs[i]
		conf, err := cc.Expanded(placeholders(att, ip))
		if err != nil {
			return nil, err
		}
		in = append(in, instance{conf: conf, ip: ip})
	}
	return k.build(in, att, env)
}

// each builds one check per instance.
func each(in []instance, one func(in *instance) (Check, error)) ([]Check, error) {
	out := make([]Check, 0, len(in))
	for i := range in {
		c, err := one(&in[i])
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// placeholders gives the values for a check's strings; ip may be nil.
func placeholders(a *attachment.Attachment, ip *attachment.IP) config.Placeholders {
	p := config.Placeholders{
		ContainerID:  a.ContainerID,
		IfName:       a.IfName,
		Network:      a.Network,
		PodNamespace: a.Pod.Namespace,
		PodName:      a.Pod.Name,
		PodUID:       a.Pod.UID,
	}
	if ip != nil {
		p.IP = ip.Address.IP.String()
	}
	return p
}

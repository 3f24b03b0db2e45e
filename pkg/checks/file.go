package checks

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"

	"github.com/netready/netready/pkg/attachment"
	"github.com/netready/netready/pkg/config"
	"github.com/netready/netready/pkg/watch"
)

var _ Check = (*fileCheck)(nil)

// buildFile makes a file check once, or per pod IP when its strings use
// {{.IP}}; with preset "calico", the file Felix writes for the pod.
func buildFile(in []instance, att *attachment.Attachment, _ *Env) ([]Check, error) {
	return each(in, func(in *instance) (Check, error) {
		if in.conf.Preset == config.PresetCalico {
			return calicoCheck(in.conf.Path, att)
		}
		path := in.conf.Path
		if !filepath.IsAbs(path) {
			return nil, never("path %q is not absolute once expanded", path)
		}
		return &fileCheck{kind: config.KindFile, path: filepath.Clean(path), contains: in.conf.Contains}, nil
	})
}

// fileCheck: path exists and, if set, contains the text.
type fileCheck struct {
	kind     string
	path     string
	contains string
	// noFolder, when set, is why a missing parent folder means the agent
	// is not set up to write the file at all (a preset's prerequisite).
	noFolder string
}

// maxFileRead bounds how much of a status file is read.
const maxFileRead = 1 << 20

func (c *fileCheck) Kind() string { return c.kind }

func (c *fileCheck) Target() string {
	if c.contains != "" {
		return fmt.Sprintf("%s contains %q", c.path, c.contains)
	}
	return c.path
}

func (c *fileCheck) Sources() []watch.Source {
	return []watch.Source{{Kind: watch.Dir, Path: filepath.Dir(c.path), Name: filepath.Base(c.path)}}
}

func (c *fileCheck) Probe(context.Context) (bool, string, error) {
	f, err := os.Open(c.path)
	if errors.Is(err, os.ErrNotExist) {
		if _, err := os.Stat(filepath.Dir(c.path)); c.noFolder != "" && errors.Is(err, os.ErrNotExist) {
			return false, c.noFolder, nil
		}
		return false, "file does not exist (yet)", nil
	}
	if err != nil {
		return false, err.Error(), nil
	}
	defer f.Close()
	if c.contains == "" {
		return true, "", nil
	}
	data, err := io.ReadAll(io.LimitReader(f, maxFileRead))
	if err != nil {
		return false, err.Error(), nil
	}
	if !bytes.Contains(data, []byte(c.contains)) {
		return false, "file does not contain the text yet", nil
	}
	return true, "", nil
}

// calicoCheck waits for the file that Calico's Felix writes into its
// endpoint-status folder once a workload endpoint's dataplane (routes and
// policy) is programmed; Calico's own CNI plugin waits for the same file
// when policy_setup_timeout_seconds is set (Calico 3.28+).
//
// Name, from projectcalico/calico:
//   - libcalico-go/lib/names/workloadendpointstatus.go,
//     WorkloadEndpointKeyToStatusFilename: the orchestrator ID, workload ID
//     and endpoint ID, each url.PathEscape'd, joined by single spaces;
//   - cni-plugin/internal/pkg/utils/utils.go, GetIdentifiers: for a pod
//     (K8S_POD_NAMESPACE and K8S_POD_NAME set) the orchestrator is "k8s",
//     the workload "<namespace>/<pod>", and the endpoint ID is CNI_IFNAME;
//   - cni-plugin/pkg/wait (ForEndpointReadyWithTimeout): the plugin waits
//     until the file exists in endpoint_status_dir, by default
//     /var/run/calico/endpoint-status.
func calicoCheck(dir string, att *attachment.Attachment) (Check, error) {
	if att.Pod.Namespace == "" || att.Pod.Name == "" {
		return nil, never(`preset "calico" needs K8S_POD_NAMESPACE and K8S_POD_NAME in CNI_ARGS`)
	}
	return &fileCheck{kind: config.KindFile, path: filepath.Join(dir, CalicoStatusFileName(att.Pod.Namespace, att.Pod.Name, att.IfName)),
		noFolder: CalicoNotWriting(dir)}, nil
}

// CalicoNotWriting says why Felix writes no endpoint status into dir: it
// writes it only with endpointStatusPathPrefix set, which is empty by
// default (the Tigera operator sets it only with
// linuxPolicySetupTimeoutSeconds > 0).
func CalicoNotWriting(dir string) string {
	return fmt.Sprintf("calico preset: %s does not exist; set endpointStatusPathPrefix in FelixConfiguration (to %s)", dir, filepath.Dir(dir))
}

// CalicoStatusFileName is Felix's endpoint-status file name for a pod.
func CalicoStatusFileName(namespace, pod, ifName string) string {
	return url.PathEscape("k8s") + " " + url.PathEscape(namespace+"/"+pod) + " " + url.PathEscape(ifName)
}

package install

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/netready/netready/pkg/conflist"
)

// CNIVersionAuto is --cni-version's one value: raise the conflist's
// cniVersion to minVerbsVersion when every plugin of its chain supports it.
const CNIVersionAuto = "auto"

// versionTimeout bounds one plugin's answer to VERSION.
const versionTimeout = 5 * time.Second

// raiseVersion returns data (f's content with the entry) with cniVersion
// raised to minVerbsVersion, so that runtimes call STATUS and GC, when
// --cni-version auto is set and every plugin of the chain, netready too,
// answers the CNI VERSION command with that version among those it
// supports; and whether it raised it. Otherwise it says which plugin does
// not, once per file and reason, and leaves the version as the vendor wrote
// it.
func (in *installer) raiseVersion(f *conflist.File, data []byte) ([]byte, bool, error) {
	if in.opts.CNIVersion != CNIVersionAuto {
		return data, false, nil
	}
	if ok, err := version.GreaterThanOrEqualTo(f.CNIVersion(), minVerbsVersion); err == nil && ok {
		return data, false, nil
	}
	types := f.PluginTypes()
	if !slices.Contains(types, conflist.PluginType) {
		types = append(types, conflist.PluginType)
	}
	var why []string
	for _, t := range types {
		if w := supports(t, in.opts.BinDir, minVerbsVersion); w != "" {
			why = append(why, w)
		}
	}
	if len(why) > 0 {
		key := f.Path + "@auto:" + strings.Join(why, ";")
		if !in.warned[key] {
			in.warned[key] = true
			in.log.Warn(fmt.Sprintf("--cni-version auto: %s keeps cniVersion %q: %s; runtimes call STATUS and GC only at %s",
				f.Path, f.CNIVersion(), strings.Join(why, "; "), minVerbsVersion))
		}
		return data, false, nil
	}
	raised, err := conflist.WithCNIVersion(data, minVerbsVersion)
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", f.Path, err)
	}
	// STATUS is every chained plugin's verdict on the node's network, not
	// netready's alone: the log names whom it now asks.
	chain := chainTypes(f)
	in.log.Info(fmt.Sprintf("--cni-version auto: every plugin of the chain supports %s; raising cniVersion so that runtimes call STATUS and GC. The runtime now calls STATUS on each of %s, and reports the node's network not ready while any one of them fails it",
		minVerbsVersion, strings.Join(chain, ", ")),
		"file", f.Path, "from", f.CNIVersion(), "status", strings.Join(chain, ","), "versionChecked", strings.Join(types, ","))
	return raised, true, nil
}

// chainTypes lists the types of f's chain once it holds netready: the
// plugins a runtime calls STATUS on (each calls its own IPAM plugin).
func chainTypes(f *conflist.File) []string {
	var out []string
	for _, p := range f.Plugins {
		var typed struct {
			Type string `json:"type"`
		}
		_ = json.Unmarshal(p, &typed) // Load parsed it already
		if typed.Type != "" && typed.Type != conflist.PluginType {
			out = append(out, typed.Type)
		}
	}
	return append(out, conflist.PluginType)
}

// versionResetWarnAfter: past this many resets of one file's cniVersion,
// the installer warns that another agent resets it.
const versionResetWarnAfter = 3

// noteVersionReset records that f, which this process wrote, kept the
// entry but lost the cniVersion --cni-version auto raised: another agent
// rewrote its file from its own template. It is raised again, and never
// counted as a revert.
func (in *installer) noteVersionReset(f *conflist.File) {
	if _, before := in.written[f.Path]; !before {
		return
	}
	in.versionResets[f.Path]++
	n := in.versionResets[f.Path]
	if n != versionResetWarnAfter {
		in.log.Info("cniVersion was reset, the entry kept; raising it again", "file", f.Path, "to", f.CNIVersion(), "resets", n)
		return
	}
	in.log.Warn(fmt.Sprintf("another agent keeps resetting cniVersion in %s to %q (%d times), keeping netready's entry: netready-install raises it to %s again each time. Configure that agent to write cniVersion %s, or leave --cni-version auto out to keep its version",
		f.Path, f.CNIVersion(), n, minVerbsVersion, minVerbsVersion))
}

// supports asks plugin pluginType in binDir for its versions, and says why
// it cannot be run at want, or "".
func supports(pluginType, binDir, want string) string {
	path, err := invoke.FindInPath(pluginType, []string{binDir})
	if err != nil {
		return fmt.Sprintf("plugin %q is not in %s", pluginType, binDir)
	}
	ctx, cancel := context.WithTimeout(context.Background(), versionTimeout)
	defer cancel()
	info, err := invoke.GetVersionInfo(ctx, path, nil)
	if err != nil {
		return fmt.Sprintf("plugin %q does not answer VERSION: %v", pluginType, err)
	}
	if !slices.Contains(info.SupportedVersions(), want) {
		return fmt.Sprintf("plugin %q supports %s, not %s", pluginType, strings.Join(info.SupportedVersions(), ", "), want)
	}
	return ""
}

package install

import (
	"context"
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
	in.log.Info("--cni-version auto: every plugin of the chain supports "+minVerbsVersion+"; raising cniVersion so that runtimes call STATUS and GC",
		"file", f.Path, "from", f.CNIVersion(), "plugins", strings.Join(types, ","))
	return raised, true, nil
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

package install

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/netready/netready/pkg/config"
	"github.com/netready/netready/pkg/conflist"
	"github.com/netready/netready/pkg/pool"
)

// ValidateFile checks an entry (a file or a folder of fragments, as
// --config takes it), or the netready entry of a conflist, with
// the plugin's own rules, offline: it reads path ("-" for stdin) and
// nothing else, and needs no writable folder. It prints every problem on
// its own line and returns the exit code: 0 for none, 1 for any.
func ValidateFile(path string, stdin io.Reader, out io.Writer) int {
	problems := entryProblems(path, stdin)
	for _, p := range problems {
		fmt.Fprintf(out, "%s: %s\n", path, strings.ReplaceAll(p.Error(), "\n", "; "))
	}
	if len(problems) > 0 {
		return 1
	}
	fmt.Fprintf(out, "%s: ok\n", path)
	return 0
}

func entryProblems(path string, stdin io.Reader) []error {
	var data []byte
	var err error
	if path == "-" {
		data, err = io.ReadAll(stdin)
	} else {
		data, err = readConfig(path)
	}
	if err != nil {
		return []error{err}
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return []error{fmt.Errorf("not a JSON object: %w", err)}
	}
	file := &conflist.File{Raw: []byte(`{"cniVersion":"1.1.0","name":"netready-validate"}`)}
	var entry json.RawMessage
	if _, isList := top["plugins"]; isList {
		file.Raw = data
		if err := json.Unmarshal(top["plugins"], &file.Plugins); err != nil {
			return []error{fmt.Errorf(`"plugins" must be a list of objects: %w`, err)}
		}
		if entry = file.Entry(); entry == nil {
			return []error{errors.New(`no entry of "type": "netready" in "plugins"`)}
		}
		if last := file.Plugins[len(file.Plugins)-1]; !bytes.Equal(last, entry) {
			return []error{errors.New(`netready's entry must be the last in "plugins": it checks what the plugins before it set up`)}
		}
	} else if entry, err = conflist.Entry(data); err != nil {
		return []error{err}
	}
	merged, err := file.Merged(entry)
	if err != nil {
		return []error{err}
	}
	problems := config.Problems(merged)
	if _, isList := top["plugins"]; isList && len(problems) == 0 {
		// A whole conflist: "auto" must find a pool netready counts in it.
		file.Path = path
		if conf, err := config.Parse(merged); err == nil && conf.Status != nil && conf.Status.IPAMAuto() {
			if _, err := pool.AutoIPAM(file); err != nil {
				problems = append(problems, err)
			}
		}
	}
	return problems
}

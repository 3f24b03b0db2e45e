package status

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"time"

	"github.com/netready/netready/pkg/atomicfile"
	"github.com/netready/netready/pkg/config"
	"github.com/netready/netready/pkg/statedir"
)

// failing is, in a network's marker folder (statedir.AgentsFailing), when
// each agent began failing without a break: STATUS is one short process
// per call, so the count across calls lives on disk. It maps an agent
// (its URL or path) to when it began failing.
type failing map[string]time.Time

func failingPath(stateDir, network string) string {
	return filepath.Join(stateDir, network, statedir.AgentsFailing)
}

// readFailing reads the record; a missing or unreadable one is empty, so
// that the worst it costs is failAfter once more.
func readFailing(path string) failing {
	f := failing{}
	data, err := os.ReadFile(path)
	if err != nil {
		return f
	}
	if json.Unmarshal(data, &f) != nil {
		return failing{}
	}
	return f
}

// writeFailing stores the record, or removes it when empty.
func writeFailing(path string, f failing) error {
	if len(f) == 0 {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
	data, err := json.Marshal(f)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return atomicfile.Write(path, data, 0o644)
}

// agentKey names an agent in the record.
func agentKey(a *config.AgentConf) string {
	return a.Kind + " " + a.URL + a.Path
}

// judgeAgents keeps, of the agents' failures now, those that have lasted
// failAfter, each saying for how long, and records when the others began.
// An agent that answers clears its record. Concurrent STATUS calls may
// each write the record; either write holds a start no later than the
// truth, so a failure is never reported early. The error is the record's
// write: the failures are judged all the same.
func judgeAgents(stateDir, network string, agents []config.AgentConf, errs map[string]error, failAfter time.Duration, now time.Time) ([]error, error) {
	path := failingPath(stateDir, network)
	before := readFailing(path)
	after := failing{}
	var out []error
	for i := range agents {
		key := agentKey(&agents[i])
		err, failed := errs[key]
		if !failed {
			continue
		}
		since, ok := before[key]
		if !ok || since.After(now) {
			since = now
		}
		after[key] = since
		if lasted := now.Sub(since); lasted >= failAfter {
			if failAfter > 0 {
				err = fmt.Errorf("%w (failing for %s, status.failAfter %s)", err, lasted.Round(time.Second), failAfter)
			}
			out = append(out, err)
		}
	}
	if maps.EqualFunc(before, after, time.Time.Equal) {
		return out, nil
	}
	return out, writeFailing(path, after)
}

package pending

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/netready/netready/pkg/config"
	"github.com/netready/netready/pkg/marker"
)

func TestScheduleGap(t *testing.T) {
	s := Schedule{Round: 5 * time.Second, Patience: 10 * time.Minute, MaxGap: time.Minute}
	created := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		after time.Duration
		n     int
		want  time.Duration
	}{
		{time.Minute, 0, 0},
		{9 * time.Minute, 7, 0},
		{11 * time.Minute, 0, 5 * time.Second},
		{11 * time.Minute, 1, 10 * time.Second},
		{11 * time.Minute, 3, 40 * time.Second},
		{11 * time.Minute, 4, time.Minute},
		{24 * time.Hour, 100, time.Minute},
	}
	for _, tt := range tests {
		if got := s.Gap(created, created.Add(tt.after), tt.n); got != tt.want {
			t.Errorf("Gap(after %s, round %d) = %s, want %s", tt.after, tt.n, got, tt.want)
		}
	}
}

func TestRecheckRefusesReadyMarker(t *testing.T) {
	_, err := Recheck(context.Background(), Inputs{Store: marker.Store{Dir: t.TempDir()}}, &marker.Marker{State: marker.StateReady}, Schedule{Round: time.Second}, func(*marker.Marker) {})
	if err == nil {
		t.Fatal("Recheck of a marker that is not pending succeeded")
	}
}

// TestRecheckNeverGivesUpOnItsOwn: a check that is never met keeps the
// re-check going until its context ends, reporting progress each round.
func TestRecheckNeverGivesUpOnItsOwn(t *testing.T) {
	dir := t.TempDir()
	m := &marker.Marker{
		Version: marker.Version, Network: "podnet", ContainerID: "c1", IfName: "eth0", IPs: []string{"10.200.0.5/24"},
		State: marker.StatePending, CreatedAt: marker.Time{Time: time.Now().Add(-time.Hour)},
		Pending: &marker.Pending{Checks: nil},
	}
	m.Pending.Checks = append(m.Pending.Checks, config.CheckConf{Kind: config.KindFile, Path: dir + "/never"})
	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	defer cancel()
	rounds := 0
	_, err := Recheck(ctx, Inputs{Store: marker.Store{Dir: dir}}, m, Schedule{Round: 50 * time.Millisecond, Patience: time.Minute, MaxGap: 100 * time.Millisecond}, func(*marker.Marker) { rounds++ })
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Recheck = %v, want it to run until its context ends", err)
	}
	if rounds < 3 {
		t.Errorf("rounds = %d, want the re-check to keep going past its patience", rounds)
	}
}

// TestRecheckNeverUndoesDELOrNewADD: when the checks turn ready, the
// re-check writes its marker only over the very marker it started from. A
// marker removed meanwhile (DEL) stays removed, and one a new ADD of the
// same attachment wrote meanwhile stays as that ADD wrote it.
func TestRecheckNeverUndoesDELOrNewADD(t *testing.T) {
	tests := []struct {
		name    string
		meddle  func(t *testing.T, s marker.Store, m *marker.Marker)
		wantErr string
		want    *marker.Marker // on disk afterwards; nil: none
	}{
		{"untouched", func(*testing.T, marker.Store, *marker.Marker) {}, "", &marker.Marker{State: marker.StateReady}},
		{"removed by DEL", func(t *testing.T, s marker.Store, m *marker.Marker) {
			if err := s.Remove(marker.Key{Network: m.Network, ContainerID: m.ContainerID, IfName: m.IfName}); err != nil {
				t.Fatal(err)
			}
		}, "marker removed while its checks ran", nil},
		{"rewritten by a new ADD", func(t *testing.T, s marker.Store, m *marker.Marker) {
			again := *m
			again.CreatedAt = marker.Time{Time: m.CreatedAt.Add(time.Minute)}
			if err := s.Write(&again); err != nil {
				t.Fatal(err)
			}
		}, "marker rewritten while its checks ran", &marker.Marker{State: marker.StatePending}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			s := marker.Store{Dir: filepath.Join(dir, "state")}
			flag := filepath.Join(dir, "programmed")
			m := &marker.Marker{
				Version: marker.Version, Network: "podnet", ContainerID: "c1", IfName: "eth0", IPs: []string{"10.200.0.5/24"},
				State: marker.StatePending, CreatedAt: marker.Time{Time: time.Now().Truncate(time.Millisecond)},
				Pending: &marker.Pending{Checks: []config.CheckConf{{Kind: config.KindFile, Path: flag}}},
			}
			if err := s.Write(m); err != nil {
				t.Fatal(err)
			}
			// The first round's progress says the checks are running: meddle
			// then, and let them turn ready.
			var once sync.Once
			progress := func(*marker.Marker) {
				once.Do(func() {
					tt.meddle(t, s, m)
					os.WriteFile(flag, nil, 0o644)
				})
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := Recheck(ctx, Inputs{Store: s}, m, Schedule{Round: 50 * time.Millisecond, Patience: time.Minute, MaxGap: time.Second}, progress)
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("Recheck = %v, want error %q", err, tt.wantErr)
			}
			got, err := s.Read(marker.Key{Network: m.Network, ContainerID: m.ContainerID, IfName: m.IfName})
			switch {
			case tt.want == nil && !errors.Is(err, fs.ErrNotExist):
				t.Errorf("marker on disk = %+v, %v; want none", got, err)
			case tt.want != nil && (err != nil || got.State != tt.want.State):
				t.Errorf("marker on disk = %+v, %v; want state %s", got, err, tt.want.State)
			}
			if entries, _ := os.ReadDir(filepath.Join(s.Dir, m.Network)); len(entries) > 1 {
				t.Errorf("files left: %v", entries)
			}
		})
	}
}

// TestRecheckRetriesAFailedWrite: on a real tmpfs that is full (ENOSPC on
// /run), a re-check whose checks hold cannot write the ready marker; it
// says so in its progress and tries again, and writes it once space is
// back, instead of ending for good.
func TestRecheckRetriesAFailedWrite(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root to mount a tmpfs: run `make test` as root")
	}
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	os.MkdirAll(state, 0o755)
	if err := unix.Mount("tmpfs", state, "tmpfs", 0, "size=256k"); err != nil {
		t.Fatalf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(state, unix.MNT_DETACH) })
	s := marker.Store{Dir: state}
	flag := filepath.Join(dir, "programmed")
	m := &marker.Marker{
		Version: marker.Version, Network: "podnet", ContainerID: "c1", IfName: "eth0", IPs: []string{"10.200.0.5/24"},
		State: marker.StatePending, CreatedAt: marker.Time{Time: time.Now().Truncate(time.Millisecond)},
		Pending: &marker.Pending{Checks: []config.CheckConf{{Kind: config.KindFile, Path: flag}}},
	}
	if err := s.Write(m); err != nil {
		t.Fatal(err)
	}
	filler := filepath.Join(state, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	for chunk := make([]byte, 4096); ; {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, unix.ENOSPC) {
				t.Fatalf("filling the tmpfs: %v", err)
			}
			break
		}
	}
	f.Close()
	os.WriteFile(flag, nil, 0o644)

	failed := make(chan string, 16)
	progress := func(p *marker.Marker) {
		for _, c := range p.Checks {
			if c.Kind == "marker" {
				select {
				case failed <- c.Why:
				default:
				}
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := Recheck(ctx, Inputs{Store: s}, m, Schedule{Round: 50 * time.Millisecond, Patience: time.Minute, MaxGap: 2 * time.Second}, progress)
		done <- err
	}()
	select {
	case why := <-failed:
		if !strings.Contains(why, "no space left on device") {
			t.Errorf("progress = %q, want it to name ENOSPC", why)
		}
	case err := <-done:
		t.Fatalf("Recheck ended (%v) while the marker could not be written, want it to retry", err)
	case <-time.After(10 * time.Second):
		t.Fatal("no progress told of the failed write")
	}
	if got, err := s.Read(marker.Key{Network: "podnet", ContainerID: "c1", IfName: "eth0"}); err != nil || got.State != marker.StatePending {
		t.Fatalf("marker while the tmpfs is full: %+v, %v; want the pending one", got, err)
	}
	os.Remove(filler)
	if err := <-done; err != nil {
		t.Fatalf("Recheck after space came back = %v, want the ready marker written", err)
	}
	if got, err := s.Read(marker.Key{Network: "podnet", ContainerID: "c1", IfName: "eth0"}); err != nil || got.State != marker.StateReady {
		t.Errorf("marker after space came back: %+v, %v; want ready", got, err)
	}
}

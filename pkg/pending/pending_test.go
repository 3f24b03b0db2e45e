package pending

import (
	"context"
	"errors"
	"testing"
	"time"

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
	_, err := Recheck(context.Background(), marker.Store{Dir: t.TempDir()}, &marker.Marker{State: marker.StateReady}, Schedule{Round: time.Second}, func(*marker.Marker) {})
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
	_, err := Recheck(ctx, marker.Store{Dir: dir}, m, Schedule{Round: 50 * time.Millisecond, Patience: time.Minute, MaxGap: 100 * time.Millisecond}, func(*marker.Marker) { rounds++ })
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Recheck = %v, want it to run until its context ends", err)
	}
	if rounds < 3 {
		t.Errorf("rounds = %d, want the re-check to keep going past its patience", rounds)
	}
}

package main

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/plugins/pkg/utils/buildversion"
)

// openLog returns a logger into the optional log file. Stdout belongs to the
// CNI result, so a log file that cannot be opened is reported on stderr and
// logging is skipped; it never fails the verb.
func openLog(path, verb string, args *skel.CmdArgs) (*slog.Logger, func()) {
	// Without a file, records are dropped before they are formatted.
	if path == "" {
		return slog.New(slog.DiscardHandler), func() {}
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
	if err != nil {
		fmt.Fprintf(os.Stderr, "netready: cannot open logFile: %v\n", err)
		return slog.New(slog.DiscardHandler), func() {}
	}
	log := slog.New(slog.NewTextHandler(f, nil)).With(
		"verb", verb, "version", buildversion.BuildVersion, "pid", os.Getpid(), "containerID", args.ContainerID, "ifName", args.IfName)
	return log, func() { f.Close() }
}

package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/plugins/pkg/utils/buildversion"

	"github.com/netready/netready/pkg/logfile"
)

// openLog returns a logger into the optional log file, which
// pkg/logfile keeps under 10 MiB with one rotation (<logFile>.1) and
// whose folder it creates. Stdout belongs to the CNI result, so a log
// file that cannot be written is reported on stderr and logging is
// skipped; it never fails the verb.
func openLog(path, verb string, args *skel.CmdArgs) *slog.Logger {
	// Without a file, records are dropped before they are formatted.
	if path == "" {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(&reportingWriter{w: logfile.New(path)}, nil)).With(
		"verb", verb, "version", buildversion.BuildVersion, "pid", os.Getpid(), "containerID", args.ContainerID, "ifName", args.IfName)
}

// reportingWriter says on stderr, once, that the log cannot be written.
type reportingWriter struct {
	w        io.Writer
	reported bool
}

func (r *reportingWriter) Write(p []byte) (int, error) {
	n, err := r.w.Write(p)
	if err != nil && !r.reported {
		r.reported = true
		fmt.Fprintf(os.Stderr, "netready: cannot write logFile: %v\n", err)
	}
	return n, err
}

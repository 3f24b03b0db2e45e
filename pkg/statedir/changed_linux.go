package statedir

import (
	"io/fs"
	"syscall"
	"time"
)

// changedAt is when a file's inode last changed. The change time, unlike
// the modification time, moves when atomicfile.Replace swaps a temp file
// with its target: the temp file then holds the old content and times,
// yet is part of a write in progress.
func changedAt(info fs.FileInfo) time.Time {
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		return time.Unix(st.Ctim.Unix())
	}
	return info.ModTime()
}

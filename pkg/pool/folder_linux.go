//go:build linux

package pool

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// folderStamp is the identity and modification time of host-local's
// allocation folder dir; ok is false when it does not exist yet.
func folderStamp(dir string) (st stamp, ok bool, err error) {
	var s unix.Stat_t
	err = unix.Stat(dir, &s)
	if errors.Is(err, unix.ENOENT) {
		return stamp{}, false, nil
	}
	if err != nil {
		return stamp{}, false, err
	}
	return stamp{dev: uint64(s.Dev), ino: s.Ino, mtimeNs: s.Mtim.Nano()}, true, nil
}

// coarseTick is the resolution of the clock the kernel stamps files with.
func coarseTick() (time.Duration, bool) {
	var res unix.Timespec
	if err := unix.ClockGetres(unix.CLOCK_REALTIME_COARSE, &res); err != nil || res.Nano() <= 0 || res.Nano() > int64(time.Second) {
		return 0, false
	}
	return time.Duration(res.Nano()), true
}

// eachAddress calls fn with the address each of host-local's files is
// named by, reading the folder with getdents into one buffer: no string,
// stat or read per file, for pools of tens of thousands of addresses.
func eachAddress(dir string, fn func(netip.Addr)) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil // nothing allocated yet
	}
	if err != nil {
		return fmt.Errorf("status ipam: open %s: %w", dir, err)
	}
	defer unix.Close(fd)
	buf := make([]byte, 64<<10)
	for {
		n, err := unix.Getdents(fd, buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("status ipam: read %s: %w", dir, err)
		}
		if n <= 0 {
			return nil
		}
		for rec := buf[:n]; len(rec) >= direntNameOffset; {
			reclen := int(binary.NativeEndian.Uint16(rec[16:18]))
			if reclen < direntNameOffset || reclen > len(rec) {
				return fmt.Errorf("status ipam: read %s: malformed directory entry", dir)
			}
			name := rec[direntNameOffset:reclen]
			if i := bytes.IndexByte(name, 0); i >= 0 {
				name = name[:i]
			}
			if ip, ok := addressName(name); ok {
				fn(ip)
			}
			rec = rec[reclen:]
		}
	}
}

// direntNameOffset is where d_name starts in a linux_dirent64: after
// d_ino (8), d_off (8), d_reclen (2) and d_type (1).
const direntNameOffset = 19

// addressName parses a file name that is an address ("10.1.0.5",
// "fd00::5"); "lock", "last_reserved_ip.0", "." and ".." are not. The name
// is not copied: ParseAddr keeps no reference to a name without a zone,
// and names with one are not host-local's.
func addressName(name []byte) (netip.Addr, bool) {
	if len(name) == 0 || bytes.IndexByte(name, '%') >= 0 || !(name[0] == ':' || isHex(name[0])) {
		return netip.Addr{}, false
	}
	ip, err := netip.ParseAddr(unsafe.String(&name[0], len(name)))
	return ip, err == nil
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

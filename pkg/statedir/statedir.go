// Package statedir is the layout of netready's state folder: a folder per
// network, <stateDir>/<network>/, every file's name in it, and the one
// sweeper of the temp files that writers killed while writing leave there.
// It imports nothing that needs the API server, so the plugin links it.
//
// Markers are <containerID>_<ifName>.json (package marker). Every other
// file's name starts with a dot and ends in no marker suffix, so that
// neither marker GC nor the sidecar's marker scan takes it for a marker.
// Temp files are atomicfile's, atomicfile.TempPrefix followed by the name
// of the file they are for and random digits.
package statedir

// MarkerSuffix ends every marker's name, and no other file's.
const MarkerSuffix = ".json"

// PodMemories is, beside the network folders, the sidecar's folder of what
// it remembers of each pod, one <podUID>+MemorySuffix each (package
// conditions). It starts with a dot, as no network's name can.
const PodMemories = ".pods"

// MemorySuffix ends a pod memory's name. It is not MarkerSuffix: a v0.5
// sidecar, rolled back to, reads every folder of stateDir as a network's,
// and would take a memory for an unreadable marker.
const MemorySuffix = ".mem"

// Off, beside the network folders, is the sidecar's note that netready is
// switched off (package offswitch): while it exists, ADD waits on no check
// and writes a pending marker. The sidecar writes it when the off switch
// is on, removes it when it is not (also at its start, one left by an
// earlier sidecar), and /run's tmpfs clears it at a reboot. The sidecar
// also sweeps the temps of it that a write killed midway leaves here
// (offswitch.Note): the root has no network folder's sweep.
const Off = ".off"

// The names of the other files in a network's folder, and who writes them.
const (
	// Outcomes is the plugin's journal of ADD outcomes that leave no
	// marker (package outcome). Package logfile adds its rotation,
	// Outcomes+".1", and its lock, Outcomes+".lock".
	Outcomes = ".outcomes"
	// InvalidConfig is the message of the last netready entry that ADD or
	// STATUS refused, for the sidecar to raise (package notes).
	InvalidConfig = ".config-invalid"
	// InstallBackoff is the installer's message while it has stopped
	// putting netready's entry back (package notes).
	InstallBackoff = ".install-backoff"
	// Pool is host-local's pool count as STATUS and the sidecar keep it.
	Pool = ".pool"
	// PoolAgent is an agent's answer about its pool as STATUS keeps it.
	PoolAgent = ".pool-agent"
	// PoolVerdict is the sidecar's count of a pool whose truth is in the
	// API server, for STATUS.
	PoolVerdict = ".pool-verdict"
	// AgentsFailing is when each agent of STATUS began failing without a
	// break (package status).
	AgentsFailing = ".agents-failing"
	// Worked is the sidecar's record that netready's checks have passed
	// on this node for the network (package conditions).
	Worked = ".worked"
	// ChassisBehind is, per node, since when each OVN chassis has been
	// behind in the cross-node wait (package checks).
	ChassisBehind = ".ovn-chassis-behind"
)

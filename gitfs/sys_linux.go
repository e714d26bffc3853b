package gitfs

import "syscall"

const (
	syscallODirectory = syscall.O_DIRECTORY
)

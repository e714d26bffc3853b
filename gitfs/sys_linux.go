package gitfs

import "syscall"

const (
	syscallONoFollow  = syscall.O_NOFOLLOW
	syscallODirectory = syscall.O_DIRECTORY
)

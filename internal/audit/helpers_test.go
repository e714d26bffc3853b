package audit

import (
	"errors"
	"os"
)

func errorsIsNotExist(err error) bool { return errors.Is(err, os.ErrNotExist) }

package frontend

import "fmt"

// classError carries a user-facing message and the class that decides its status.
type classError struct {
	class error
	msg   string
}

func (e *classError) Error() string { return e.msg }
func (e *classError) Unwrap() error { return e.class }

// errorf returns an error of class with a formatted message; the class name is not repeated in the
// message, since clients read the message.
func errorf(class error, format string, args ...any) error {
	return &classError{class: class, msg: fmt.Sprintf(format, args...)}
}

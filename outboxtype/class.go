package outboxtype

// ErrorClass is how the relay treats a publish error.
type ErrorClass int

const (
	// ClassTransient: retry this message later with backoff, counting an attempt.
	ClassTransient ErrorClass = iota
	// ClassPermanent: dead-letter this message now.
	ClassPermanent
	// ClassUnavailable: the broker is down; retry later without counting an attempt.
	ClassUnavailable
)

func (c ErrorClass) String() string {
	switch c {
	case ClassPermanent:
		return "permanent"
	case ClassUnavailable:
		return "unavailable"
	default:
		return "transient"
	}
}

package dynamo

import (
	"errors"
	"fmt"
	"net"

	"github.com/aws/smithy-go"
)

// Why a call found DynamoDB unavailable, where the SDK tells: with
// ErrNoTable and ErrNoCredentials, what an operator has to check. Each
// wraps ErrUnavailable.
var (
	// ErrAccessDenied: DynamoDB refused the credentials, or the principal
	// lacks a permission (AccessDeniedException, UnrecognizedClientException,
	// InvalidSignatureException, an expired or missing token).
	ErrAccessDenied = fmt.Errorf("dynamo: access denied: %w", ErrUnavailable)
	// ErrUnreachable: no answer came from the endpoint: the connection was
	// refused or timed out, the host was not found, or the call's deadline
	// passed first.
	ErrUnreachable = fmt.Errorf("dynamo: unreachable: %w", ErrUnavailable)
)

// causes are the sentinels Cause tells apart, the more specific first (a
// sentinel that wraps another comes before it).
var causes = []error{
	ErrSchema, ErrNoTable, ErrNoCredentials, ErrAccessDenied, ErrUnreachable,
	ErrThrottled, ErrConflict, ErrNotFound, ErrUnavailable,
}

// Cause returns the most specific sentinel err wraps, of ErrSchema,
// ErrNoTable, ErrNoCredentials, ErrAccessDenied, ErrUnreachable,
// ErrThrottled, ErrConflict, ErrNotFound and ErrUnavailable; nil when it
// wraps none of them. It is the one classification of the store's errors
// that the messages for operators (what to check) switch on.
func Cause(err error) error {
	for _, c := range causes {
		if errors.Is(err, c) {
			return c
		}
	}
	return nil
}

// unavailable returns the sentinel of an SDK error that is neither a
// throttle, a conflict, a missing table nor missing credentials:
// ErrAccessDenied, ErrUnreachable, or else ErrUnavailable (a server error,
// an answer that could not be read).
func unavailable(err error) error {
	var api smithy.APIError
	if errors.As(err, &api) {
		switch api.ErrorCode() {
		case "AccessDeniedException", "UnrecognizedClientException", "InvalidSignatureException",
			"ExpiredTokenException", "MissingAuthenticationTokenException":
			return ErrAccessDenied
		}
		return ErrUnavailable
	}
	// A *net.OpError, a DNS error, a *url.Error around one, and a passed
	// deadline (context.DeadlineExceeded is a net.Error) all say that
	// nothing answered.
	var nerr net.Error
	if errors.As(err, &nerr) {
		return ErrUnreachable
	}
	return ErrUnavailable
}

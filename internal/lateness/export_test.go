package lateness

import (
	"context"
	"time"
)

// SetSleep replaces how the meter sleeps.
func (m *Meter) SetSleep(f func(ctx context.Context, d time.Duration) bool) { m.sleep = f }

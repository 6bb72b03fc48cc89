// What a front and a lane host reach here beyond the public API
// (internal/schedhook).

package actors

import (
	"context"

	"github.com/lanesched/lanes/internal/schedhook"
	"github.com/lanesched/lanes/lanes"
)

func init() {
	schedhook.CheckFits = checkFits
	schedhook.CheckTenant = checkTenant
	schedhook.MeasureBatch = measureBatch
	schedhook.BatchBounds = func(s any) (int, int64) { return s.(*Scheduler).batchBounds() }
	schedhook.SubmitNotifyMemo = func(s any, ctx context.Context, tenant string, b lanes.Batch, memo *schedhook.OwnershipMemo, ended func(lanes.Pending)) (lanes.Pending, error) {
		return s.(*Scheduler).submitNotifyMemo(ctx, tenant, b, memo, ended)
	}
}

package checks

import (
	"fmt"

	"github.com/netready/netready/pkg/attachment"
	"github.com/netready/netready/pkg/config"
)

// buildPolicy makes the checks of agent-programmed state.
func buildPolicy(cc *config.CheckConf, att *attachment.Attachment, env *Env) ([]Check, error) {
	return nil, fmt.Errorf("check kind %q is not implemented", cc.Kind)
}

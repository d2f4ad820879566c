package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/cann-train/cann-train/engine/strategy"
)

func newSearchCmd(e *env) *cobra.Command {
	var modelArg, clusterArg, evaluate, output string
	var top int
	cmd := &cobra.Command{
		Use:   "search --model M --cluster C",
		Short: "Rank parallel strategies (DP×TP×PP×EP×CP, micro-batch, recompute, ZeRO) by a cost model",
		Long: `Searches every parallel plan that fits in memory and ranks them by predicted
throughput, showing memory headroom, communication and pipeline-bubble shares
and the failure blast radius. --model and --cluster take a YAML file or a
preset name (--list-presets). --evaluate scores one given plan. -o html writes
a self-contained HTML report (inline CSS, no external assets) of the plans.`,
		Example: `  cann-train search --model moe_bert --cluster 1024_ascend910b
  cann-train search --model gpt3_18.4b --cluster vtrain_a100_256 --top 5 -o json
  cann-train search --model moe_bert --cluster 1024_ascend910b --top 20 -o html > plans.html
  cann-train search --model my_model.yaml --cluster my_cluster.yaml \
      --evaluate "tp=8,pp=12,dp=4,mb=1,recompute=full,zero=1,vpp=1,sp=true,ep=1,cp=1"`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(output, "table", "json", "html"); err != nil {
				return err
			}
			if modelArg == "" || clusterArg == "" {
				return errors.New("--model and --cluster are required (a YAML file or a preset; presets: " + fmt.Sprint(strategy.Presets()) + ")")
			}
			m, err := loadModel(modelArg)
			if err != nil {
				return err
			}
			c, err := loadCluster(clusterArg)
			if err != nil {
				return err
			}
			var res []strategy.Estimate
			if evaluate != "" {
				p, err := strategy.ParsePlan(evaluate)
				if err != nil {
					return fmt.Errorf("--evaluate: %w", err)
				}
				res = []strategy.Estimate{strategy.Evaluate(m, c, p)}
			} else if res, err = strategy.Search(cmd.Context(), m, c, strategy.SearchOptions{TopK: top}); err != nil {
				return err
			}
			switch output {
			case "html":
				return strategy.WriteHTML(e.out, strategy.Report{Model: m, Cluster: c, Estimates: res})
			case "json":
				enc := json.NewEncoder(e.out)
				enc.SetIndent("", "  ")
				if evaluate != "" {
					return enc.Encode(res[0])
				}
				return enc.Encode(res)
			}
			return strategy.WriteTable(e.out, res)
		},
	}
	f := cmd.Flags()
	f.StringVar(&modelArg, "model", "", "model spec: YAML file or preset name")
	f.StringVar(&clusterArg, "cluster", "", "cluster spec: YAML file or preset name")
	f.StringVar(&evaluate, "evaluate", "", `score one plan, e.g. "tp=8,pp=12,dp=4,mb=1,recompute=full,zero=1"`)
	f.IntVar(&top, "top", 10, "plans to show")
	f.StringVarP(&output, "output", "o", "table", "table, json, or html (a self-contained report page)")
	return cmd
}

func loadModel(arg string) (strategy.Model, error) {
	if _, err := os.Stat(arg); err == nil {
		return strategy.LoadModel(arg)
	}
	return strategy.PresetModel(arg)
}

func loadCluster(arg string) (strategy.Cluster, error) {
	if _, err := os.Stat(arg); err == nil {
		return strategy.LoadCluster(arg)
	}
	return strategy.PresetCluster(arg)
}

package main

import (
	"context"

	"github.com/teapot-lb/teapot-lb/proxy/cpubudget"
	"github.com/teapot-lb/teapot-lb/tenantsync"
)

// tenantCPU charges a tenant stream's work (its member-health pushes) to
// the tenant's host CPU budget, which the data plane's accountant keeps.
type tenantCPU struct{ t *cpubudget.Tenant }

var _ tenantsync.TenantCPU = tenantCPU{}

// Wait waits while the tenant is in debt of its budget.
func (c tenantCPU) Wait(ctx context.Context) bool { return c.t.ThrottleCtx(ctx) }

// Run runs f and charges the CPU time it spent, measured on its thread.
func (c tenantCPU) Run(f func()) { c.t.ChargeDirect(cpubudget.Measure(f)) }

// tenantCPUs returns each tenant's budget of cpu for tenantsync.Config.CPU.
func tenantCPUs(cpu *cpubudget.Budgets) func(string) tenantsync.TenantCPU {
	return func(tenant string) tenantsync.TenantCPU { return tenantCPU{cpu.Tenant(tenant)} }
}

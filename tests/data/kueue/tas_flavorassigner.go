/*
Copyright The Kubernetes Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package flavorassigner

import (
	"fmt"
	"slices"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"

	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	schdcache "sigs.k8s.io/kueue/pkg/cache/scheduler"
	"sigs.k8s.io/kueue/pkg/features"
	"sigs.k8s.io/kueue/pkg/resources"
	"sigs.k8s.io/kueue/pkg/util/tas"
	"sigs.k8s.io/kueue/pkg/workload"
)

// WorkloadsTopologyRequests - returns the TopologyRequests of the workload
func (a *Assignment) WorkloadsTopologyRequests(log logr.Logger, wl *workload.Info, cq *schdcache.ClusterQueueSnapshot) schdcache.WorkloadTASRequests {
	tasRequests := make(schdcache.WorkloadTASRequests)
	for i, podSet := range wl.Obj.Spec.PodSets {
		if isTASRequested(&podSet, cq) {
			psAssignment := a.podSetAssignmentByName(podSet.Name)
			if psAssignment.Status.IsError() {
				// There is no resource quota assignment for the PodSet - no need to check TAS.
				continue
			}
			if psAssignment.Count == 0 {
				log.V(3).Info("Skipping TAS for count=0 podSet", "podSet", podSet.Name)
				continue
			}
			if psAssignment.TopologyAssignment != nil && !psAssignment.HasUnhealthyNode(wl) {
				// skip if already computed and doesn't need recomputing
				// if it already has an assignment but needs recomputing due to a failed node
				// we add it to the list of TASRequests
				continue
			}
			isTASImplied := isTASImplied(&podSet, cq)

			var previousAssignment *kueue.TopologyAssignment

			// Only unconstrained topology is supported with elastic workload slices.
			if workload.IsElasticWorkload(wl.Obj) && features.Enabled(features.ElasticJobsViaWorkloadSlicesWithTAS) {
				if podSet.TopologyRequest != nil && podSet.TopologyRequest.Required != nil {
					a.psError(psAssignment, ErrElasticRequiredTopologyNotSupported)
					continue
				}
				if podSet.TopologyRequest != nil && podSet.TopologyRequest.Preferred != nil {
					a.psError(psAssignment, ErrElasticPreferredTopologyNotSupported)
					continue
				}
				previousAssignment = getPreviousTopologyAssignment(a.replaceWorkloadSlice, podSet.Name)
			}

			psTASRequest, err := podSetTopologyRequest(psAssignment, wl, cq, isTASImplied, i, previousAssignment)
			if err != nil {
				a.psError(psAssignment, err)
				continue
			} else if psTASRequest != nil {
				tasRequests[psTASRequest.Flavor] = append(tasRequests[psTASRequest.Flavor], *psTASRequest)
			}
		}
	}
	return tasRequests
}

func (psa *PodSetAssignment) HasUnhealthyNode(wl *workload.Info) bool {
	return workload.HasUnhealthyNodes(wl.Obj) && slices.ContainsFunc(psa.TopologyAssignment.Domains, func(domain tas.TopologyDomainAssignment) bool {
		return workload.HasUnhealthyNode(wl.Obj, domain.Values[len(domain.Values)-1])
	})
}

func podSetTopologyRequest(psAssignment *PodSetAssignment,
	wl *workload.Info,
	cq *schdcache.ClusterQueueSnapshot,
	isTASImplied bool,
	podSetIndex int,
	previousAssignment *kueue.TopologyAssignment) (*schdcache.TASPodSetRequests, error) {
	if len(cq.TASFlavors) == 0 {
		return nil, ErrNoTASCacheInformation
	}
	podCount := psAssignment.Count
	tasFlvr, err := onlyTASFlavor(psAssignment.Flavors, cq.TASFlavors)
	if err != nil {
		return nil, err
	}
	if cq.HasMultiKueueAdmissionCheck() || (!workload.HasQuotaReservation(wl.Obj) && cq.HasProvRequestAdmissionCheck(*tasFlvr)) {
		// Delay TAS when MultiKueue is used (topology always assigned on worker cluster).
		// For ProvisioningRequest, delay TAS on first scheduling pass only (topology assigned after provisioning).
		psAssignment.DelayedTopologyRequest = new(kueue.DelayedTopologyRequestStatePending)
		return nil, nil
	}
	podSet := &wl.Obj.Spec.PodSets[podSetIndex]
	// Use PodSpec directly for TAS placement, not quota-filtered admission values.
	singlePodRequests := resources.NewRequestsFromPodSpec(&podSet.Template.Spec)
	var podSetUpdates []*kueue.PodSetUpdate
	for _, ac := range wl.Obj.Status.AdmissionChecks {
		if ac.State == kueue.CheckStateReady {
			for _, psUpdate := range ac.PodSetUpdates {
				if psUpdate.Name == podSet.Name {
					podSetUpdates = append(podSetUpdates, &psUpdate)
				}
			}
		}
	}
	return &schdcache.TASPodSetRequests{
		Count:              podCount,
		SinglePodRequests:  singlePodRequests,
		PodSet:             podSet,
		PodSetUpdates:      podSetUpdates,
		Flavor:             *tasFlvr,
		Implied:            isTASImplied,
		PodSetGroupName:    podSetGroupName(podSet),
		PreviousAssignment: previousAssignment,
	}, nil
}

// podSetGroupName returns ps's PodSetGroupName, or nil if ps has no TopologyRequest.
func podSetGroupName(ps *kueue.PodSet) *string {
	if ps.TopologyRequest == nil {
		return nil
	}
	return ps.TopologyRequest.PodSetGroupName
}

func onlyTASFlavor(
	resourceAssignment ResourceAssignment,
	tasFlavors map[kueue.ResourceFlavorReference]*schdcache.TASFlavorSnapshot,
) (*kueue.ResourceFlavorReference, error) {
	flavors := sets.New[kueue.ResourceFlavorReference]()

	for _, flavorAssignment := range resourceAssignment {
		if tasFlavors[flavorAssignment.Name] != nil {
			flavors.Insert(flavorAssignment.Name)
		}
	}

	if flavors.Len() == 0 {
		return nil, ErrNoTASFlavorAssigned
	}

	if flavors.Len() == 1 {
		return new(sets.List(flavors)[0]), nil
	}

	return nil, &MultipleTASFlavorsAssignedError{Flavors: sets.List(flavors)}
}

func checkPodSetAndFlavorMatchForTAS(cq *schdcache.ClusterQueueSnapshot, ps *kueue.PodSet, flavor *kueue.ResourceFlavor, rg *schdcache.ResourceGroup) *string {
	if isTASRequested(ps, cq) {
		if isTASImplied(ps, cq) {
			// If this is a TAS-only CQ, then we don't need to check the flavor because
			// all flavors in the ClusterQueue are TAS flavors, and all Workloads submitted
			// to this ClusterQueue are expected to use TAS, and it's a match.
			return nil
		}
		// PodSet explicitly requires TAS, so we need to check if the flavor supports it.
		if flavor.Spec.TopologyName == nil {
			if !hasOverlapWithPodRequestedResources(ps, rg.CoveredResources) {
				// We only accept the flavor if it does not have any intersection with
				// the resources which are going to be provided by the TAS flavor.
				// This flavor may still provide quota-only resources using ResourceTransformations.
				return nil
			}
			return new(fmt.Sprintf("Flavor %q does not support TopologyAwareScheduling", flavor.Name))
		}
		s := cq.TASFlavors[kueue.ResourceFlavorReference(flavor.Name)]
		if s == nil {
			// Skip Flavors if they don't have TAS information. This should generally
			// not happen, but possible in race-situation when the ResourceFlavor
			// API object was recently added but is not cached yet.
			return new(fmt.Sprintf("Flavor %q information missing in TAS cache", flavor.Name))
		}
		if !s.HasLevel(ps.TopologyRequest) {
			// Skip flavors which don't have the requested level
			return new(fmt.Sprintf("Flavor %q does not contain the requested level", flavor.Name))
		}
		// PodSet requires TAS and the flavor supports it, so it's a match.
		return nil
	}
	// PodSet doesn't require TAS, but the flavor supports it.
	if flavor.Spec.TopologyName != nil {
		return new(fmt.Sprintf("Flavor %q supports only TopologyAwareScheduling", flavor.Name))
	}
	// PodSet doesn't require TAS and the flavor doesn't support it, so it's a match.
	return nil
}

// hasOverlapWithPodRequestedResources checks if the PodSet's resource requests overlap with the specified flavor resources.
func hasOverlapWithPodRequestedResources(ps *kueue.PodSet, flavorResources sets.Set[corev1.ResourceName]) bool {
	requests := resources.NewRequestsFromPodSpec(&ps.Template.Spec)
	has := false
	requests.ForEach(func(name corev1.ResourceName, _ int64) {
		if flavorResources.Has(name) {
			has = true
		}
	})
	return has
}

// isTASImplied returns true if TAS is requested implicitly.
func isTASImplied(ps *kueue.PodSet, cq *schdcache.ClusterQueueSnapshot) bool {
	return !workload.IsExplicitlyRequestingTAS(*ps) && cq.IsTASOnly()
}

// isTASRequested checks if TAS is requested for the input PodSet, either
// explicitly or implicitly.
func isTASRequested(ps *kueue.PodSet, cq *schdcache.ClusterQueueSnapshot) bool {
	return workload.IsExplicitlyRequestingTAS(*ps) || isTASImplied(ps, cq)
}

// getPreviousTopologyAssignment extracts the topology assignment from a replaced workload slice.
func getPreviousTopologyAssignment(replaceWorkloadSlice *workload.Info, podSetName kueue.PodSetReference) *kueue.TopologyAssignment {
	if replaceWorkloadSlice == nil || replaceWorkloadSlice.Obj.Status.Admission == nil {
		return nil
	}
	for _, psa := range replaceWorkloadSlice.Obj.Status.Admission.PodSetAssignments {
		if psa.Name == podSetName && psa.TopologyAssignment != nil {
			return psa.TopologyAssignment
		}
	}
	return nil
}

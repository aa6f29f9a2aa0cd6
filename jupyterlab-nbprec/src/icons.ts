/**
 * nbprec's icons: a dump folder (a folder holding a bar chart) and the investigation (bars under a lens).
 */
import { LabIcon } from '@jupyterlab/ui-components';

const DUMP_FOLDER_SVG = `<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">
  <path class="jp-icon3 jp-icon-selectable" fill="#616161"
    d="M2.5 5.5C2.5 4.7 3.1 4 4 4h5.2l2 2.2H20c.8 0 1.5.7 1.5 1.5v10.8c0 .8-.7 1.5-1.5 1.5H4
       c-.9 0-1.5-.7-1.5-1.5z"/>
  <path class="jp-icon-accent0 jp-icon-selectable-inverse" fill="#fff"
    d="M6.5 17v-3.5h2.2V17zm4.4 0V9.5h2.2V17zm4.4 0v-5.5h2.2V17z"/>
</svg>`;

const INVESTIGATION_SVG = `<svg xmlns="http://www.w3.org/2000/svg" width="52" height="52" viewBox="0 0 52 52">
  <rect class="jp-icon3" fill="#616161" x="6" y="30" width="6" height="14" rx="1"/>
  <rect class="jp-icon3" fill="#616161" x="15" y="20" width="6" height="24" rx="1"/>
  <rect class="jp-icon-warn0" fill="#f57c00" x="24" y="10" width="6" height="34" rx="1"/>
  <circle style="fill:none" stroke="#1976d2" stroke-width="3.5" cx="35" cy="26" r="9"/>
  <path style="fill:none" stroke="#1976d2" stroke-width="4" stroke-linecap="round" d="M41.5 32.5l6 6"/>
</svg>`;

export const dumpFolderIcon = new LabIcon({ name: 'nbprec:dump-folder', svgstr: DUMP_FOLDER_SVG });

export const investigationIcon = new LabIcon({ name: 'nbprec:investigation', svgstr: INVESTIGATION_SVG });

# Written by `shapetune report`. Render: gnuplot DIR/plots/winner_map.gp (from any directory).
here = ARG0[1:strlen(ARG0) - strlen("winner_map.gp")]
data = here . "../data/"
reset
set terminal svg size 1020,768 dynamic noenhanced font "sans,11" background rgb "white"
set output here . "winner_map.svg"
set title "winning variant per problem"
set grid
set xrange [-0.5:11.5]
set yrange [37.5:-0.5]
set ytics font ",8"
set xtics rotate by 45 right ("vec" 0, "vec4" 1, "multi_tensor" 2, "flat_vec" 3, "row_vec" 4, "register_row" 5, "cudnn" 6, "fused_register" 7, "fused_vec" 8, "fused_smem_row" 9, "fused_warp_row" 10, "fused_register_row" 11)
plot data . "winner_map.dat" using 1:2:ytic(3) with points pt 7 ps 1.5 notitle
